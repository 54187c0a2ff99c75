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

    def observe(self, key: int, k: int, n_accepted: int) -> None:
        a = self.rate(key)
        outcomes = [1.0] * n_accepted + ([0.0] if n_accepted < k else [])
        for outcome in outcomes:
            a += self.smoothing * (outcome - a)
        self.values[key] = a
