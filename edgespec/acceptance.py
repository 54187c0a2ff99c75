"""Acceptance estimates the adaptive policy keeps per drafter: exponential moving averages.

A drafter supplies its own (Drafter.acceptance): what its acceptance depends on is a fact
about the drafter, while the policy only reads alphas and reports outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence


class ByPosition:
    """Per draft position, whatever the key: a draft model's acceptance, split by whether the
    draft model was sure of the token (ModelDrafter's confidence; without one, every token
    counts as sure), and how often it is sure, so goes on drafting, at each position.

    Each step updates the positions it reached: accepted ones towards 1, the first rejected
    one towards 0 (later positions were never judged). A position never reached yet takes
    the estimates of the deepest one reached: a draft model's acceptance given every token
    before it was kept rises along a draft (docs/benchmarks.md), so this errs low.
    """

    def __init__(self, prior: float = 0.6, smoothing: float = 0.1) -> None:
        # per step and position: 0.3 let two rejections in a row (1 in 11 at 0.7 acceptance)
        # price a draft model below plain decoding for the rest of a request (replay.py)
        self.smoothing = smoothing
        self.sure = [prior]  # acceptance of a token the drafter was sure of
        self.unsure = [prior]  # ... of one it was not (the last of its draft)
        self.goes_on = [1.0]  # how often it is sure there (1.0: no confidence)

    def alphas(self, key: int, n: int) -> list[float]:
        """Acceptance of the token at each position, sure or not."""
        sure, unsure, goes_on = (extended(v, n) for v in (self.sure, self.unsure, self.goes_on))
        return [c * a + (1 - c) * u for c, a, u in zip(goes_on, sure, unsure)]

    def alphas_sure(self, key: int, n: int) -> list[float]:
        return extended(self.sure, n)

    def continues(self, key: int, n: int) -> list[float]:
        return extended(self.goes_on, n)

    def observe(self, key: int, k: int, n_accepted: int, unsure_end: bool = False) -> None:
        for values in (self.sure, self.unsure, self.goes_on):
            values[:] = extended(values, k)
        for i in range(min(k, n_accepted + 1)):
            estimate = self.unsure if unsure_end and i == k - 1 else self.sure
            estimate[i] += self.smoothing * ((1.0 if i < n_accepted else 0.0) - estimate[i])
        for i in range(k):
            went_on = 0.0 if unsure_end and i == k - 1 else 1.0
            self.goes_on[i] += self.smoothing * (went_on - self.goes_on[i])


def extended(values: list[float], n: int) -> list[float]:
    """values' first n (it holds at least one), a position never reached taking the deepest
    one's."""
    return (values + [values[-1]] * n)[:n]


class ByMatchLength:
    """One rate per drafted token, by key (prompt lookup: the length of the match behind the
    draft; a longer match predicts a longer copy)."""

    def __init__(
        self, priors: Sequence[float] = (0.2, 0.4, 0.55, 0.7, 0.8), smoothing: float = 0.1
    ) -> None:
        self.priors = tuple(priors)  # by key 1, 2, ...; the last for longer ones
        self.smoothing = smoothing  # per drafted token
        self.values: dict[int, float] = {}

    def rate(self, key: int) -> float:
        prior = self.priors[min(max(key, 1), len(self.priors)) - 1]
        return self.values.get(key, prior)

    def alphas(self, key: int, n: int) -> list[float]:
        return [self.rate(key)] * n

    def alphas_sure(self, key: int, n: int) -> list[float]:
        return self.alphas(key, n)

    def continues(self, key: int, n: int) -> list[float]:
        return [1.0] * n  # prompt lookup drafts the k it is asked for

    def observe(self, key: int, k: int, n_accepted: int, unsure_end: bool = False) -> None:
        a = self.rate(key)
        outcomes = [1.0] * n_accepted + ([0.0] if n_accepted < k else [])
        for outcome in outcomes:
            a += self.smoothing * (outcome - a)
        self.values[key] = a
