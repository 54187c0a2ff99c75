"""Pricing a step: the target's cost curve, a drafter's offer priced (Option), and the k that
maximises expected tokens per second (best_choice, pure functions of the curve and the
options)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from edgespec.drafters.base import Drafter


@dataclass
class CostCurve:
    """Measured seconds for one target pass over n tokens (logits for every row), n = 1..len.

    Starts from a calibration (or stored tune data) and follows the device's speed: each
    verify step scales every width alike by what it took against the curve, so the shape
    stays the calibrated one. Learned width by width, a burst of host noise on the one-token
    passes plain decoding makes (the width seen most) made wide passes look cheap and turned
    drafting on where it loses (docs/decisions.md).
    """

    target_s: list[float]  # [n_max] seconds for n = 1..n_max
    # seconds per token of the draft model, as calibrated beside the target (the loader
    # prices the ModelDrafter with it; the policy then learns each drafter's price itself)
    draft_s: float = 0.0
    smoothing: float = 0.1  # for the target's and the drafters' observed costs
    # seconds a pass costs beyond target_s where the runtime keeps one CUDA graph (llama.cpp
    # on CUDA: Runtime.keeps_one_graph) and the pass's width changed, and again for
    # the next pass of that width, which captures the graph; target_s are replayed passes
    switch_s: float = 0.0

    def target(self, n: int) -> float:
        """Beyond the calibration, linear in n at the slope of the whole curve's chord: the
        slope of its last two widths is one noisy pair, and a calibration whose widest
        pass came out cheaper than the one before priced catching a draft model up on 50
        tokens below nothing."""
        t = self.target_s
        if n <= len(t):
            return t[n - 1]
        slope = max(0.0, (t[-1] - t[0]) / (len(t) - 1)) if len(t) > 1 else t[0]
        return t[-1] + slope * (n - len(t))

    def targets(self, n: int) -> list[float]:
        """t(1), ..., t(n), extended past the calibration as target() extends it: one list
        for a loop over widths (the plan prices up to k_max widths per drafter every step)."""
        t = self.target_s
        return t[:n] if n <= len(t) else t + [self.target(m) for m in range(len(t) + 1, n + 1)]

    def observe_target(self, n: int, seconds: float) -> float:
        """Rescale the curve towards a pass of n tokens taking `seconds`; return the factor
        (the drafters, on the same device, slow down and speed up with it)."""
        if not 1 <= n <= len(self.target_s):
            return 1.0
        scale = followed(1.0, seconds / self.target_s[n - 1], self.smoothing)
        self.target_s = [t * scale for t in self.target_s]
        return scale

    def ratios(self) -> list[float]:
        return [t / self.target_s[0] for t in self.target_s]


# One observed cost moves a price at most this factor: a one-off slow pass won't price it out
MAX_PULL = 2.0


def followed(estimate: float, observed: float, smoothing: float) -> float:
    """One step of a moving average of costs, the observation clipped to [estimate / MAX_PULL,
    estimate * MAX_PULL]; an estimate of 0 (none yet) takes the observation whole."""
    if estimate <= 0.0:
        return observed
    clipped = min(max(observed, estimate / MAX_PULL), estimate * MAX_PULL)
    return estimate + smoothing * (clipped - estimate)


def expected_tokens(alphas: Sequence[float]) -> float:
    """Tokens one step emits when draft position i is accepted with probability alphas[i]
    given all before it were: 1 + sum_j prod_{i<=j} alphas[i] (the bonus/recovered token is 1).
    """
    total, survive = 1.0, 1.0
    for a in alphas:
        survive *= a
        total += survive
    return total


@dataclass(frozen=True)
class Option:
    """One drafter's offer, priced: what best_choice weighs against plain decoding."""

    drafter: Drafter
    alphas: Sequence[float]  # acceptance per draft position, as many as it can propose
    token_s: float  # seconds per drafted token after the first
    catch_up_s: float = 0.0  # forwarding what it missed while idle, before drafting
    # for a drafter that ends its draft at a token it is unsure of (ModelDrafter's confidence):
    # how often it is sure at each position, so goes on, and what a sure token's acceptance
    # is there (alphas: any token's); () = it drafts every token asked for
    continues: Sequence[float] = ()
    alphas_sure: Sequence[float] = ()
    # seconds per emitted token that other drafters, left behind by this step, will spend
    # catching up on it later (AdaptivePolicy.left_behind_s)
    leaves_s: float = 0.0
    first_s: float | None = None  # seconds of a draft's first token (None: token_s)

    def draft_s(self, k: int) -> float:
        """Seconds to draft k tokens (catch-up aside)."""
        return draft_s(self.first_s, self.token_s, k)


def draft_s(first_s: float | None, token_s: float, k: int) -> float:
    """Seconds to draft k >= 1 tokens: the first token's pass, then token_s a token. A draft
    model's first pass re-reads the token the target added, at another width than the rest:
    on llama.cpp's one CUDA graph it costs two tokens', and priced at k * (t_draft / k)
    learned at k = 1, a draft of 5 looked 1.5x dearer than it was (docs/decisions.md)."""
    return (token_s if first_s is None else first_s) + (k - 1) * token_s


@dataclass(frozen=True)
class Choice:
    drafter: Drafter | None
    k: int
    tokens_per_second: float


def best_choice(
    curve: CostCurve,
    options: Sequence[Option],
    k_max: int,
    plain_leaves_s: float = 0.0,
    switch_s: Sequence[float] = (),
) -> Choice:
    """The drafter and k that maximise expected tokens / expected seconds; k = 0 is plain,
    its token charged plain_leaves_s for the drafters it leaves behind. switch_s: what a
    target pass of n = 1, 2, ... tokens costs beyond the curve now (Switches.switch_s;
    () = nothing).

    A pure function of the cost curve and the priced options (unit-tested on its own); on a
    tie the earlier option wins.
    """
    plain_s = curve.target(1) + (switch_s[0] if switch_s else 0.0)
    best = Choice(None, 0, 1.0 / (plain_s + plain_leaves_s))
    for option in options:
        # one that cannot win is not priced (draft_rates ran for prompt lookup's one-token
        # matches and for a draft model left behind on every step of random text)
        if rate_bound(curve, option, k_max) <= best.tokens_per_second:
            continue
        for k, rate in enumerate(draft_rates(curve, option, k_max, switch_s), start=1):
            if rate > best.tokens_per_second:
                best = Choice(option.drafter, k, rate)
    return best


def rate_bound(curve: CostCurve, option: Option, k_max: int) -> float:
    """An upper bound on every rate draft_rates gives option: a step emits at most
    1 / (1 - a) tokens with every acceptance at most a (and at most k_max + 1), and costs at
    least the catch-up, a one-token draft and the cheapest verify pass (switches, a longer
    draft and what it leaves behind only add; a draft that ends early costs one of those)."""
    n = min(k_max, len(option.alphas))
    if n == 0:
        return 0.0
    a = max(max(option.alphas[:n]), max(option.alphas_sure[:n], default=0.0))
    tokens = n + 1.0 if a >= 1.0 else min(n + 1.0, 1.0 / (1.0 - a))
    least_s = option.catch_up_s + option.draft_s(1) + min(curve.targets(n + 1)[1:])
    return tokens / least_s if least_s > 0 else math.inf


def draft_rates(
    curve: CostCurve, option: Option, k_max: int, switch_s: Sequence[float] = ()
) -> list[float]:
    """Expected tokens per second of a step asking option's drafter for k = 1, 2, ... tokens.

    A drafter that ends its draft at a token it is unsure of reaches position j if it was
    sure at every position before (reach_j: the product of `continues`), and emits token j
    if every token before it, all sure, and token j itself are accepted; the step costs what
    a draft of the length it ends at costs. With continues all 1 (and alphas_sure = alphas):
    expected_tokens(alphas[:k]) for catch_up + k * token_s + target(k + 1) seconds; switch_s
    adds to each verify pass by its width (best_choice).
    """
    n = min(k_max, len(option.alphas))
    goes_on = list(option.continues[:n]) + [1.0] * (n - len(option.continues))
    sure = list(option.alphas_sure[:n]) or list(option.alphas[:n])
    verify_s = curve.targets(n + 1)
    if switch_s:
        verify_s = [t + x for t, x in zip(verify_s, switch_s)]
    rates = []
    tokens, reach, kept = 1.0, 1.0, 1.0  # kept: every token before position k accepted
    ended = option.catch_up_s  # expected seconds of the drafts that ended before position k
    # Option.draft_s(k), as a running sum: this loop runs k_max times per drafter and plan
    # (a method call a position was a fifth of the plan's time)
    alphas, token_s, leaves_s = option.alphas, option.token_s, option.leaves_s
    drafted_s = option.draft_s(1) - token_s
    for k in range(1, n + 1):
        tokens += reach * kept * alphas[k - 1]
        drafted_s += token_s
        cost = drafted_s + verify_s[k]  # a draft of exactly k tokens
        rates.append(tokens / (ended + reach * cost + tokens * leaves_s))
        ended += reach * (1.0 - goes_on[k - 1]) * cost
        reach *= goes_on[k - 1]
        kept *= sure[k - 1]
    return rates
