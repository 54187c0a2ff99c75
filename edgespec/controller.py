"""Which drafter and how many tokens to draft at each step.

FixedPolicy is the anchors' default (one drafter, fixed k). AdaptivePolicy (below) picks the
drafter and k that maximise expected tokens per second from a measured cost curve and online
acceptance estimates, and k = 0 (a plain step) when speculation would lose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from edgespec.drafters.base import Drafter
from edgespec.sampling import SamplingParams


class Policy(Protocol):
    def begin(self, drafters: Mapping[str, Drafter]) -> None:
        """A new request starts; per-request estimates reset."""
        ...

    def plan(self, context: Sequence[int], sp: SamplingParams) -> tuple[Drafter | None, int]:
        """The drafter to use and the number of tokens to draft (0 = plain step)."""
        ...

    def observe(
        self, drafter: str | None, k: int, n_accepted: int, t_draft: float, t_verify: float
    ) -> None:
        """What the step cost and how many drafted tokens the target kept."""
        ...


class FixedPolicy:
    def __init__(self, drafter: str | None, k: int) -> None:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.drafter_name = drafter
        self.k = k if drafter else 0
        self.drafter: Drafter | None = None

    def begin(self, drafters: Mapping[str, Drafter]) -> None:
        self.drafter = drafters.get(self.drafter_name) if self.drafter_name else None
        if self.drafter_name and self.drafter is None:
            raise ValueError(f"no drafter named {self.drafter_name!r}; have {sorted(drafters)}")

    def plan(self, context: Sequence[int], sp: SamplingParams) -> tuple[Drafter | None, int]:
        return self.drafter, self.k

    def observe(
        self, drafter: str | None, k: int, n_accepted: int, t_draft: float, t_verify: float
    ) -> None:
        pass


# --- the adaptive controller -----------------------------------------------------------------


@dataclass
class CostCurve:
    """Measured seconds for one target pass over n tokens (logits for every row), n = 1..len.

    Starts from a calibration (or stored tune data) and follows what each verify step costs.
    """

    target_s: list[float]  # [n_max] seconds for n = 1..n_max
    draft_s: float = 0.0  # seconds per drafted token of the model drafter
    smoothing: float = 0.1

    def target(self, n: int) -> float:
        t = self.target_s
        if n <= len(t):
            return t[n - 1]
        slope = t[-1] - t[-2] if len(t) > 1 else t[-1]
        return t[-1] + slope * (n - len(t))  # beyond the calibration: linear in n

    def observe_target(self, n: int, seconds: float) -> None:
        if 1 <= n <= len(self.target_s):
            self.target_s[n - 1] += self.smoothing * (seconds - self.target_s[n - 1])

    def observe_draft(self, k: int, seconds: float) -> None:
        if k > 0:
            self.draft_s += self.smoothing * (seconds / k - self.draft_s)

    def ratios(self) -> list[float]:
        return [t / self.target_s[0] for t in self.target_s]


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
class Choice:
    drafter: str | None
    k: int
    tokens_per_second: float


def best_choice(
    curve: CostCurve,
    model_alphas: Sequence[float] | None,  # per draft position; None = no model drafter
    ngram_alpha: float | None,  # per token for the current match; None = no match
    ngram_available: int,
    k_max: int,
    ngram_cost_s: float = 0.0,
    model_catch_up_s: float = 0.0,  # the draft model forwarding what it missed while idle
) -> Choice:
    """The drafter and k that maximise expected tokens / expected seconds; k = 0 is plain.

    A pure function of the cost curve and the acceptance estimates (unit-tested on its own).
    """
    best = Choice(None, 0, 1.0 / curve.target(1))
    if model_alphas is not None:
        for k in range(1, min(k_max, len(model_alphas)) + 1):
            seconds = model_catch_up_s + k * curve.draft_s + curve.target(k + 1)
            rate = expected_tokens(model_alphas[:k]) / seconds
            if rate > best.tokens_per_second:
                best = Choice("model", k, rate)
    if ngram_alpha is not None:
        for k in range(1, min(k_max, ngram_available) + 1):
            rate = expected_tokens([ngram_alpha] * k) / (ngram_cost_s + curve.target(k + 1))
            if rate > best.tokens_per_second:
                best = Choice("ngram", k, rate)
    return best


class AdaptivePolicy:
    """Per step, choose the drafter and k from the cost curve and online acceptance.

    Acceptance is an exponential moving average, reset per request: per draft position for
    the model drafter, per match length for prompt lookup. A drafter left unused is probed
    again after probe_every steps (doubling after each probe that fails to pay, up to
    max_probe_every), so a change of text (prose -> code block) is noticed.
    """

    def __init__(
        self,
        curve: CostCurve,
        *,
        k_max: int = 8,
        smoothing: float = 0.3,
        ngram_smoothing: float = 0.1,
        model_prior: float = 0.6,
        ngram_priors: Sequence[float] = (0.2, 0.4, 0.55, 0.7, 0.8),
        probe_every: int = 16,
        max_probe_every: int = 128,
    ) -> None:
        self.curve = curve
        self.k_max = k_max
        self.smoothing = smoothing  # per step and draft position (model)
        self.ngram_smoothing = ngram_smoothing  # per drafted token (prompt lookup)
        self.model_prior = model_prior
        # by match length 1, 2, ...; the last for longer ones and for following a source
        self.ngram_priors = tuple(ngram_priors)
        self.probe_every = probe_every
        self.max_probe_every = max_probe_every
        self.drafters: dict[str, Drafter] = {}
        self.begin({})

    def begin(self, drafters: Mapping[str, Drafter]) -> None:
        self.drafters = dict(drafters)
        self.model_alphas = [self.model_prior] * self.k_max
        self.ngram_alphas: dict[int, float] = {}
        self.idle = {name: 0 for name in self.drafters}  # steps since each drafter last ran
        # Prompt lookup costs nothing to draft, so it is probed four times as often.
        self.base_interval = {
            name: max(1, self.probe_every // 4) if name == "ngram" else self.probe_every
            for name in self.drafters
        }
        self.interval = dict(self.base_interval)
        self.last_match = 0
        self.probing: str | None = None

    def plan(self, context: Sequence[int], sp: SamplingParams) -> tuple[Drafter | None, int]:
        ngram = self.drafters.get("ngram")
        match_len, available = ngram.lookahead(context) if ngram else (0, 0)  # type: ignore[attr-defined]
        self.last_match = match_len
        model = self.drafters.get("model")
        model_catch_up_s = self.catch_up_cost(model, context) if model else 0.0
        choice = best_choice(
            self.curve,
            self.model_alphas if model else None,
            self.ngram_alpha(match_len) if match_len else None,
            available,
            self.k_max,
            model_catch_up_s=model_catch_up_s,
        )
        self.probing = None
        if choice.k == 0:
            choice = self.probe(available, model_catch_up_s)
        return (self.drafters[choice.drafter] if choice.drafter else None), choice.k

    def catch_up_cost(self, model: Drafter | None, context: Sequence[int]) -> float:
        """Seconds for the draft model to forward the tokens it has not seen. Every drafted
        step re-forwards one or two (in draft_s already); beyond that the draft is assumed to
        batch like the target (its cost curve's shape, scaled by draft_s)."""
        behind = getattr(model, "behind", lambda _: 0)(context)
        if behind <= 2:
            return 0.0
        return self.curve.draft_s * self.curve.target(behind) / self.curve.target(1)

    def model_can_win(self) -> bool:
        """Whether the model drafter would beat plain decoding at 90% acceptance per token.

        On a compute-bound device (a 2-core CPU) it would not, and probing it only costs time.
        """
        optimistic = best_choice(self.curve, [0.9] * self.k_max, None, 0, self.k_max)
        return optimistic.drafter == "model"

    def ngram_alpha(self, match_len: int) -> float:
        """Acceptance per token for prompt lookup after a match of this length."""
        prior = self.ngram_priors[min(match_len, len(self.ngram_priors)) - 1]
        return self.ngram_alphas.get(match_len, prior)

    def probe(self, ngram_available: int, model_catch_up_s: float) -> Choice:
        """A drafter idle for its interval gets a short draft, to refresh its estimates.

        The draft model is not probed while catching up would cost more than a target token:
        on a CPU that is whenever it is more than a few tokens behind (a new prompt, or after
        prompt lookup ran), and measured there, such probes cost more than they found
        (docs/benchmarks.md, ONNX section)."""
        for name in ("ngram", "model"):
            if name not in self.drafters or self.idle[name] < self.interval[name]:
                continue
            if name == "ngram" and ngram_available == 0:
                continue
            if name == "model" and (
                not self.model_can_win() or model_catch_up_s > self.curve.target(1)
            ):
                continue
            self.probing = name
            k = min(2, self.k_max, ngram_available if name == "ngram" else self.k_max)
            return Choice(name, k, 0.0)
        return Choice(None, 0, 0.0)

    def observe(
        self, drafter: str | None, k: int, n_accepted: int, t_draft: float, t_verify: float
    ) -> None:
        self.curve.observe_target(k + 1, t_verify)
        for name in self.idle:
            self.idle[name] += 1
        if drafter is None or k == 0:
            return
        self.idle[drafter] = 0
        if drafter == "model":
            self.curve.observe_draft(k, t_draft)
            self.update_model(k, n_accepted)
        else:
            self.update_ngram(k, n_accepted)
        if self.probing == drafter:  # back off when probes keep failing to pay
            paid = n_accepted == k
            self.interval[drafter] = (
                self.base_interval[drafter]
                if paid
                else min(2 * self.interval[drafter], self.max_probe_every)
            )

    def update_model(self, k: int, n_accepted: int) -> None:
        s = self.smoothing
        for i in range(min(k, n_accepted + 1)):
            outcome = 1.0 if i < n_accepted else 0.0
            self.model_alphas[i] += s * (outcome - self.model_alphas[i])

    def update_ngram(self, k: int, n_accepted: int) -> None:
        a = self.ngram_alpha(self.last_match)
        outcomes = [1.0] * n_accepted + ([0.0] if n_accepted < k else [])
        for outcome in outcomes:
            a += self.ngram_smoothing * (outcome - a)
        self.ngram_alphas[self.last_match] = a
