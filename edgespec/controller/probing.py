"""What probes that lose cost a request, and may cost it (PROBE_BUDGET): a probe owes what it
lost beyond plain decoding's price, and the next waits until time passing has paid it back."""

from __future__ import annotations

from edgespec.controller.pricing import CostCurve

# The share of decoding time losing probes may cost (each owes its loss until time repays it)
PROBE_BUDGET = 0.02


class ProbeBudget:
    """The debt of the last losing probes, the cost of the probe under way, and what this
    request's probes lost, all at the prices held."""

    def __init__(self, curve: CostCurve) -> None:
        self.curve = curve
        # seconds of loss the last losing probes left to pay back, and what the probe under
        # way costs at the prices held
        self.debt_s, self.cost_s = 0.0, 0.0
        self.max_tokens: int | None = None  # the request's (begin)
        self.lost_s = 0.0  # what this request's probes lost

    def begin(self, max_tokens: int | None) -> None:
        self.max_tokens = max_tokens
        self.lost_s = 0.0

    def owes(self) -> bool:
        """Whether the last losing probes are not yet paid for: no probe now."""
        return self.debt_s > 0.0

    def affords(self, loss_s: float) -> bool:
        """Whether a probe that would lose loss_s (its first token wrong) keeps what this
        request's probes lose within PROBE_BUDGET of the request (max_tokens at plain
        decoding's price; no bound where it has none). Until a probe has lost, one may cost
        more: only probes find a drafter that pays, and the request's text is new (a first
        probe held to the budget left a short request plain where a free drafter was always
        right). Owing per probe (debt_s) frees the first (COLD_JUDGED) and pays back as
        time passes, which a short request has not (docs/decisions.md, PROBE_BUDGET)."""
        if self.max_tokens is None or self.lost_s == 0.0:
            return True
        allowed_s = PROBE_BUDGET * self.max_tokens * self.curve.target(1)
        return self.lost_s + loss_s <= allowed_s

    def repay(self, passed_s: float) -> None:
        """Time passing pays back probes, at the prices held (as each probe's loss is priced)."""
        self.debt_s = max(0.0, self.debt_s - PROBE_BUDGET * passed_s)

    def lost(self, emitted_s: float) -> float:
        """The probe under way emitted what plain decoding would take emitted_s for: what it
        lost (negative: gained), counted against the request's budget."""
        loss_s = self.cost_s - emitted_s
        self.lost_s += max(0.0, loss_s)
        return loss_s

    def owe(self, loss_s: float) -> None:
        """A probe of a judged drafter owes what it lost (one that gained pays back)."""
        self.debt_s = max(0.0, self.debt_s + loss_s)
