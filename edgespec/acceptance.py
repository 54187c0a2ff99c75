"""Acceptance estimates the adaptive policy keeps per drafter: exponential moving averages.

A drafter supplies its own (Drafter.acceptance): what its acceptance depends on is a fact
about the drafter, while the policy only reads alphas and reports outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence


class ByPosition:
    """Per draft position, whatever the key: a draft model's acceptance falls along a draft.

    Each step updates the positions it reached: accepted ones towards 1, the first rejected
    one towards 0 (later positions were never judged).
    """

    def __init__(self, prior: float = 0.6, smoothing: float = 0.3) -> None:
        self.prior = prior
        self.smoothing = smoothing  # per step and draft position
        self.values: list[float] = []

    def alphas(self, key: int, n: int) -> list[float]:
        self.grow(n)
        return self.values[:n]

    def observe(self, key: int, k: int, n_accepted: int) -> None:
        self.grow(k)
        for i in range(min(k, n_accepted + 1)):
            outcome = 1.0 if i < n_accepted else 0.0
            self.values[i] += self.smoothing * (outcome - self.values[i])

    def grow(self, n: int) -> None:
        if n > len(self.values):
            self.values += [self.prior] * (n - len(self.values))


class ByMatchLength:
    """Two rates per key (prompt lookup: the length of the match behind the draft; a longer
    match predicts a longer copy): that a draft's first token is accepted, and that a later
    one is, given the one before it was.

    A match either is the text being copied or is not, and its first token mostly decides
    which. With one rate for every position, a long accepted copy (16 tokens, 16 updates)
    vouched for the next match's first token: on a CPU where a 16-token pass costs 7.5
    one-token passes, 15-token drafts of a fresh match were rejected at their first token.
    """

    def __init__(
        self, priors: Sequence[float] = (0.2, 0.4, 0.55, 0.7, 0.8), smoothing: float = 0.1
    ) -> None:
        self.priors = tuple(priors)  # by key 1, 2, ...; the last for longer ones
        self.smoothing = smoothing  # per judged token
        self.first: dict[int, float] = {}
        self.later: dict[int, float] = {}

    def prior(self, key: int) -> float:
        return self.priors[min(max(key, 1), len(self.priors)) - 1]

    def alphas(self, key: int, n: int) -> list[float]:
        first = self.first.get(key, self.prior(key))
        return [first] + [self.later.get(key, self.prior(key))] * (n - 1) if n else []

    def observe(self, key: int, k: int, n_accepted: int) -> None:
        if k == 0:
            return
        a = self.first.get(key, self.prior(key))
        self.first[key] = a + self.smoothing * (float(n_accepted > 0) - a)
        # positions 1.. that were judged: the accepted ones, then the first rejected one
        later = [1.0] * max(n_accepted - 1, 0) + ([0.0] if 0 < n_accepted < k else [])
        a = self.later.get(key, self.prior(key))
        for outcome in later:
            a += self.smoothing * (outcome - a)
        self.later[key] = a
