"""Acceptance estimates the adaptive policy keeps per drafter: exponential moving averages
within a request, each request starting from every earlier request's outcomes.

A drafter supplies its own (Drafter.acceptance): what its acceptance depends on is a fact
about the drafter, while the policy only reads alphas and reports outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Tally:
    """Outcomes counted over every request so far: `hits` of `seen` came out true."""

    hits: int = 0
    seen: int = 0

    def add(self, hit: bool) -> None:
        self.hits += hit
        self.seen += 1

    def add_counts(self, hits: int, seen: int) -> None:
        """Outcomes counted elsewhere (an earlier process's: Acceptance.recall)."""
        self.hits += hits
        self.seen += seen

    def rate(self, prior: float, weight: float) -> float:
        """The observed rate, the prior counting as `weight` outcomes of its own."""
        return (self.hits + prior * weight) / (self.seen + weight)


# A first request's prior, in outcomes, until the tallies hold more: the first outcomes count
COLD_WEIGHT = 2.0

# A draft model's prior, in tokens, at a later request's start: earlier outcomes decide
PRIOR_TOKENS = 20.0


class ByPosition:
    """Per draft position, whatever the key: a draft model's acceptance, split by whether the
    draft model was sure of the token (ModelDrafter's confidence; without one, every token
    counts as sure), and how often it is sure, so goes on drafting, at each position.

    Each step updates the positions it reached: accepted ones towards 1, the first rejected
    one towards 0 (later positions were never judged). A position never reached yet takes
    the estimates of the deepest one reached: a draft model's acceptance given every token
    before it was kept rises along a draft, so this errs low.

    A request starts from every earlier request's outcomes, pooled over positions, the prior
    counting as `prior_weight` tokens: a request's last estimates are biased low (a draft
    model falls out of use where its estimate fell, and is rarely judged again), and a
    fixed prior at a request's start priced a draft model kept 93% of the time when sure at
    0.6 (bench/replay.py).
    """

    def __init__(
        self,
        prior: float = 0.6,
        smoothing: float = 0.05,
        prior_weight: float = PRIOR_TOKENS,
        cold_weight: float = COLD_WEIGHT,
    ) -> None:
        # smoothing: about the last 20 outcomes, so a run of rejections cannot end a drafter's
        # use for a request (docs/decisions.md)
        self.prior, self.smoothing, self.prior_weight = prior, smoothing, prior_weight
        self.cold_weight = cold_weight
        self.sure_tally, self.unsure_tally, self.goes_on_tally = Tally(), Tally(), Tally()
        self.next_request()

    def next_request(self) -> None:
        """Start the estimates from the outcomes of every request so far."""
        self.sure = [self.sure_tally.rate(self.prior, self.prior_weight)]  # of a sure token
        self.unsure = [self.unsure_tally.rate(self.prior, self.prior_weight)]  # of an unsure
        # how often it is sure of a token (1.0: no confidence), so drafts on past it
        self.goes_on = [self.goes_on_tally.rate(1.0, self.prior_weight)]
        # what a request's start is worth in outcomes: the prior alone is worth cold_weight
        # (a first request learns at 1 / (cold_weight + n) per outcome, down to smoothing)
        self.start_weight = self.cold_weight + self.sure_tally.seen + self.unsure_tally.seen
        self.judged = [0]  # outcomes per position this request

    def outcomes(self) -> dict[str, tuple[int, int]]:
        tallies = self.tallies_by_name()
        return {name: (t.hits, t.seen) for name, t in tallies.items()}

    def recall(self, outcomes: dict[str, tuple[int, int]]) -> None:
        for name, tally in self.tallies_by_name().items():
            if name in outcomes:
                tally.add_counts(*outcomes[name])
        self.next_request()

    def tallies_by_name(self) -> dict[str, Tally]:
        return {"sure": self.sure_tally, "unsure": self.unsure_tally, "goes_on": self.goes_on_tally}

    def gain(self, i: int) -> float:
        """How far the next outcome at position i moves its estimates: the moving average's
        smoothing, or more while the request's start holds fewer outcomes than its window."""
        return max(self.smoothing, 1.0 / (self.start_weight + self.judged[i] + 1))

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
        self.judged += [self.judged[-1]] * (k - len(self.judged))  # as the estimates extend
        for i in range(min(k, n_accepted + 1)):
            unsure = unsure_end and i == k - 1
            estimate = self.unsure if unsure else self.sure
            kept = i < n_accepted
            estimate[i] += self.gain(i) * (kept - estimate[i])
            (self.unsure_tally if unsure else self.sure_tally).add(kept)
        for i in range(k):
            went_on = not (unsure_end and i == k - 1)
            self.goes_on[i] += self.gain(i) * (went_on - self.goes_on[i])
            self.goes_on_tally.add(went_on)
        for i in range(k):
            self.judged[i] += 1


def extended(values: list[float], n: int) -> list[float]:
    """values' first n (it holds at least one), a position never reached taking the deepest
    one's."""
    return (values + [values[-1]] * n)[:n]


class ByMatchLength:
    """One rate per drafted token, by key (prompt lookup: the length of the match behind the
    draft; a longer match predicts a longer copy). A key's first draft in a request starts
    from every earlier request's outcomes under that key, its prior counting as
    `prior_weight` tokens: code copies its long matches 90%+ of the time, where the priors
    say 0.7-0.8 (bench/replay.py).

    A key's first outcomes move its rate as ByPosition's do: by 1/(cold_weight + n + 1) over
    the outcomes under it so far, down to the moving average's smoothing. At the smoothing
    from the first, a process's first request (each `edgespec run`) ran 2-16% slower on code
    and up to 9% on edit than one that started from earlier requests' outcomes
    (bench/replay.py --fresh, two recordings on seven curves); learned as fast as this, 1-9%
    and up to 4%, and later requests (their keys judged many times before) are unchanged."""

    def __init__(
        self,
        priors: Sequence[float] = (0.2, 0.4, 0.55, 0.7, 0.8),
        smoothing: float = 0.1,
        prior_weight: float = 5.0,
        cold_weight: float = COLD_WEIGHT,
    ) -> None:
        self.priors = tuple(priors)  # by key 1, 2, ...; the last for longer ones
        self.smoothing = smoothing  # per drafted token
        self.prior_weight = prior_weight
        self.cold_weight = cold_weight
        self.tallies: dict[int, Tally] = {}  # by key, over every request so far
        self.values: dict[int, float] = {}  # by key, this request

    def next_request(self) -> None:
        self.values.clear()

    def outcomes(self) -> dict[str, tuple[int, int]]:
        return {str(key): (t.hits, t.seen) for key, t in sorted(self.tallies.items())}

    def recall(self, outcomes: dict[str, tuple[int, int]]) -> None:
        for name, counts in outcomes.items():
            # a match length (a short one: int() refuses a name of thousands of digits)
            if name.isascii() and name.isdigit() and len(name) <= 4 and int(name) >= 1:
                self.tallies.setdefault(int(name), Tally()).add_counts(*counts)
        self.next_request()

    def gain(self, key: int) -> float:
        """How far the next outcome under key moves its rate (ByPosition.gain's rule)."""
        tally = self.tallies.get(key)
        return max(self.smoothing, 1.0 / (self.cold_weight + (tally.seen if tally else 0) + 1))

    def rate(self, key: int) -> float:
        if key in self.values:
            return self.values[key]
        prior = self.priors[min(max(key, 1), len(self.priors)) - 1]
        tally = self.tallies.get(key)
        return prior if tally is None else tally.rate(prior, self.prior_weight)

    def alphas(self, key: int, n: int) -> list[float]:
        return [self.rate(key)] * n

    def alphas_sure(self, key: int, n: int) -> list[float]:
        return self.alphas(key, n)

    def continues(self, key: int, n: int) -> list[float]:
        return [1.0] * n  # prompt lookup drafts the k it is asked for

    def observe(self, key: int, k: int, n_accepted: int, unsure_end: bool = False) -> None:
        a = self.rate(key)
        for kept in [True] * n_accepted + ([False] if n_accepted < k else []):
            a += self.gain(key) * (kept - a)
            self.tallies.setdefault(key, Tally()).add(kept)
        self.values[key] = a
