"""AdaptivePolicy: per step, the drafter and k that maximise expected tokens per second from
the cost curve and online acceptance estimates, and k = 0 (a plain step) when speculation would
lose. It knows drafters only through the Drafter protocol: any drafter is chosen, priced and
observed alike. The measurements behind its constants: docs/decisions.md."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from edgespec.controller.estimates import Estimate, Memory, Shadow, priors, taught
from edgespec.controller.lessons import LessonStore
from edgespec.controller.pricing import (
    Choice,
    CostCurve,
    Option,
    best_choice,
    followed,
)
from edgespec.controller.probing import ProbeBudget
from edgespec.controller.switches import Switches
from edgespec.drafters.base import Drafter, Offer
from edgespec.runtime import K_MAX
from edgespec.sampling import SamplingParams

# Drafted tokens judged before a failing probe backs off: one short probe says little
COLD_JUDGED = 4

# A never-judged drafter is probed this long while probes pay: its prior alone never tries it
TRIAL_TOKENS = 16

# The last drafter stays within this share of plain's rate: estimate noise alone won't drop it
STAY_MARGIN = 0.02


class AdaptivePolicy:
    """Per step, choose the drafter and k from the cost curve and online acceptance.

    Every drafter is priced from its own offer and price, and learned with the acceptance
    estimate it supplies; both are kept from request to request (Learned). A drafter left
    unused is probed again after probe_every steps (a free one four times as often; doubling
    after each probe that fails to pay, up to max_probe_every), so a change of text (prose ->
    code block) is noticed. A drafter never judged (no probe in any request yet) is tried
    first: prefilled with the prompt whatever its prior says, and probed step after step while
    its probes pay (TRIAL_TOKENS). A drafter whose offers preview their tokens (prompt lookup) is
    never probed: each preview is judged by the tokens the target goes on to emit (Shadow),
    which costs nothing, while a probe costs a wider verify pass (on a 2-core CPU, 2 draft
    tokens cost 1.5 target tokens). The drafter the last step drafted with stays while it
    prices within STAY_MARGIN of plain decoding (staying): its estimate's noise alone does not
    send it back to probes.
    """

    def __init__(
        self,
        curve: CostCurve,
        *,
        k_max: int = K_MAX,
        probe_every: int = 16,
        max_probe_every: int = 128,
        store: LessonStore | None = None,
    ) -> None:
        self.curve = curve
        self.memory = Memory(store)  # what earlier requests and processes taught
        self.k_max = k_max
        self.probe_every = probe_every
        self.max_probe_every = max_probe_every
        self.estimates: list[Estimate] = []
        self.probing: Drafter | None = None
        self.chosen_rate = 0.0  # expected tokens/s of the last plan's best choice
        self.prefill = False  # whether the next to_sync is a request's first
        self.switches = Switches(curve, k_max)  # what a change of width costs (one graph)
        self.budget = ProbeBudget(curve)  # what losing probes cost and may cost
        self.drafted_by: Drafter | None = None  # the last step's drafter (None: plain)

    def begin(self, drafters: Sequence[Drafter], max_tokens: int | None = None) -> None:
        self.budget.begin(max_tokens)
        self.memory.learned.update(taught(self.estimates))
        self.estimates = [self.new_estimate(d) for d in drafters]
        self.probing = None
        self.chosen_rate = 1.0 / self.curve.target(1)  # plain, until a plan says otherwise
        self.prefill = True  # the next to_sync is the request's first: the prompt
        self.switches.begin()
        self.drafted_by = None

    def end(self) -> None:
        """Keep what the request taught for a later process (this one's next request takes
        it from the estimates: begin)."""
        self.memory.keep(self.estimates)

    def new_estimate(self, drafter: Drafter) -> Estimate:
        known = self.memory.known(drafter)
        new = known is None
        if known is None:
            known = priors(drafter)
        else:
            known.acceptance.next_request()
        e = Estimate(drafter, known.token_s, known.learns_cost, known.acceptance)
        e.judged, e.first_s = known.judged, known.first_s
        # A free drafter costs one wider verify pass to probe, so it is probed more often.
        e.base_interval = e.interval = max(1, self.probe_every // 4) if e.free else self.probe_every
        if new:  # never judged: probed at once (where it could win), not after an interval
            e.idle = e.interval
        e.trial = e.judged == 0 and not e.free  # a free drafter's probes cost it nothing
        return e

    def estimate(self, drafter: Drafter) -> Estimate:
        return next(e for e in self.estimates if e.drafter is drafter)

    def plan(
        self, context: Sequence[int], sp: SamplingParams, offers: Sequence[Offer]
    ) -> tuple[Drafter | None, int]:
        for e, offer in zip(self.estimates, offers, strict=True):
            self.judge_shadow(e, context)
            e.offer = offer
        priced = [(e, self.option(e, e.offer.available)) for e in self.estimates
                  if e.offer.available > 0]  # fmt: skip
        live = [e for e, option in priced if self.in_use(e, option)]
        options = [self.leaving(option, [x for x in live if x is not e]) for e, option in priced]
        leaves_s, switch_s = self.left_behind_s(live), self.switches.switch_s()
        choice = best_choice(self.curve, options, self.k_max, leaves_s, switch_s)
        if switch_s:  # the same choice without one-off costs (the one graph's switches, a
            # drafter's catch-up): what pays in a row
            caught_up = [replace(o, catch_up_s=0.0) if o.catch_up_s else o for o in options]
            steady = best_choice(self.curve, caught_up, self.k_max, leaves_s)
            catch_up_s = next((o.catch_up_s for o in options if o.drafter is steady.drafter), 0.0)
            draft_s = self.estimate(choice.drafter).draft_s(choice.k) if choice.drafter else 0.0
            choice = self.switches.rent_or_buy(choice, steady, switch_s, catch_up_s, draft_s)
        if choice.k == 0:
            choice = self.staying(options, choice, switch_s)
        self.chosen_rate = choice.tokens_per_second
        self.probing = None
        if choice.k == 0:
            choice = self.probe(switch_s)
        self.cast_shadows(len(context), choice.drafter)
        return choice.drafter, choice.k

    def staying(
        self, options: Sequence[Option], plain: Choice, switch_s: Sequence[float]
    ) -> Choice:
        """The last step's drafter at its best k, where that is within STAY_MARGIN of plain
        decoding's rate; else plain."""
        option = next((o for o in options if o.drafter is self.drafted_by), None)
        if option is None:
            return plain
        stay = best_choice(self.curve, [option], self.k_max, math.inf, switch_s)  # plain: 0/s
        floor = (1 - STAY_MARGIN) * plain.tokens_per_second
        return stay if stay.drafter is not None and stay.tokens_per_second >= floor else plain

    def in_use(self, e: Estimate, option: Option) -> bool:
        """A priced drafter in step (a drafted step's re-forwarding behind it at most, so
        option carries no catch-up) that beats plain decoding there: one a step of another
        kind leaves behind."""
        if e.free or e.offer.behind > 2:
            return False
        return best_choice(self.curve, [option], self.k_max).drafter is e.drafter

    def leaving(self, option: Option, behind: Sequence[Estimate]) -> Option:
        """option charged what its steps leave the drafters `behind` to catch up on (as it
        is where it leaves none: a plain copy of a frozen dataclass costs microseconds)."""
        return replace(option, leaves_s=self.left_behind_s(behind)) if behind else option

    def left_behind_s(self, drafters: Sequence[Estimate]) -> float:
        """Seconds per token a step not drafted by these drafters costs them later: each
        catches up on it in its next forward pass, at the slope of its cost curve (without
        this, prompt lookup's one-token guesses, a plain step each, left a draft model
        further behind every step until catching up priced it out for the rest of the
        request: bench/replay.py)."""
        if not drafters:
            return 0.0
        slope = (self.curve.target(4) - self.curve.target(2)) / (2 * self.curve.target(1))
        return sum(e.token_s for e in drafters) * max(slope, 0.0)

    def judge_shadow(self, e: Estimate, context: Sequence[int]) -> None:
        """Learn from e's pending shadow draft once the emitted tokens decide it."""
        if e.shadow is None:
            return
        outcome = e.shadow.outcome(context)
        if outcome is not None:
            e.acceptance.observe(e.shadow.key, *outcome)
            e.shadow = None

    def cast_shadows(self, at: int, drafting: Drafter | None) -> None:
        """Every previewing drafter but the one drafting now (its verify pass judges it)
        leaves its preview to be judged by the tokens emitted from here, one at a time."""
        for e in self.estimates:
            if e.drafter is drafting:
                e.shadow = None  # judged by the verify pass: counting both would count twice
            elif e.shadow is None and e.offer.preview:
                e.shadow = Shadow(at, e.offer.preview[: self.k_max], e.offer.key)

    def option(self, e: Estimate, available: int, offer: Offer | None = None) -> Option:
        """e's drafter priced for its offer at the last plan (or `offer`), catch-up included."""
        offer = offer or e.offer
        n = min(available, self.k_max)
        return Option(
            e.drafter,
            e.acceptance.alphas(offer.key, n),
            e.token_s,
            self.catch_up_cost(e.token_s, offer.behind),
            e.acceptance.continues(offer.key, n),
            e.acceptance.alphas_sure(offer.key, n),
            first_s=e.first_s,
        )

    def to_sync(self, context: Sequence[int], offers: Sequence[Offer]) -> list[Drafter]:
        """Priced drafters to bring into step now, each in one batched pass, where in step they
        would beat the last plan's choice: when a request begins, whatever the prompt costs
        (prefilled beside the target's); before a step, only if catching up costs at most one
        target token (a few tokens behind, after a short run of prompt lookup or plain steps).
        One further behind stays behind, priced with its catch-up, as probe() treats it:
        catching a draft model up after every run of prompt lookup or for every probe cost more
        than it drafted (docs/decisions.md). A drafter on trial (never judged) is prefilled
        whatever its estimate: its first probes decide it. A free drafter reads the prompt
        with the target's prefill (what it costs is the prompt's), and later tokens as it
        offers."""
        prefill, self.prefill = self.prefill, False
        switch_s = [] if prefill else self.switches.switch_s()  # the prompt: judged as in a run
        due = []
        for i, e in enumerate(self.estimates):
            if e.free:  # the prompt indexed with the target's prefill (prompt lookup: 18 ms
                if prefill:  # at 8,000 tokens, which the first step's plan had charged to
                    due.append(e.drafter)  # decoding); then it indexes as it goes
                continue
            if not self.can_win(e):
                continue
            offer = offers[i]
            if offer.behind <= 2 or offer.available == 0:
                continue
            if prefill and e.trial:  # its trial starts at once, with the prompt read
                due.append(e.drafter)
                continue
            if not prefill and self.catch_up_cost(e.token_s, offer.behind) > self.curve.target(1):
                continue
            in_step = replace(self.option(e, offer.available, offer), catch_up_s=0.0)
            # priced as plan prices it, switches included (rent-or-buy buys the catch-up with
            # them): a draft model was caught up before each plain step plan then chose
            in_step_choice = best_choice(self.curve, [in_step], self.k_max, switch_s=switch_s)
            # its own steps, not plain decoding's: plain weighed alone is not charged for
            # leaving drafters behind, so it beat a last plan that was, and a draft model in
            # use was caught up before every other plain step
            wins = in_step_choice.drafter is e.drafter
            if wins and in_step_choice.tokens_per_second > self.chosen_rate:
                due.append(e.drafter)
        return due

    def catch_up_cost(self, token_s: float, behind: int) -> float:
        """Seconds for a drafter to forward the tokens it has not seen. Every drafted step
        re-forwards one or two (in token_s already); beyond that the draft is assumed to
        batch like the target (its cost curve's shape, scaled by token_s)."""
        if behind <= 2:
            return 0.0
        return token_s * self.curve.target(behind) / self.curve.target(1)

    def can_win(self, e: Estimate) -> bool:
        """Whether the drafter would beat plain decoding at 90% acceptance per token.

        On a compute-bound device a draft model would not, and probing it only costs time."""
        return self.winning_k(e) > 0

    def winning_k(self, e: Estimate) -> int:
        """The k at which the drafter would pay most at 90% acceptance per token (0: none).

        The answer depends on the price in target tokens alone (the curve keeps its shape:
        CostCurve.observe_target rescales it, and each step rescales a draft model's price
        with it), so it is kept until that changes: pricing k_max widths every step is
        a measurable part of a step."""
        price = e.token_s / self.curve.target_s[0]
        held = e.can_win_at
        if held is None or held[0] is not self.curve or not math.isclose(held[1], price):
            optimistic = Option(e.drafter, [0.9] * self.k_max, e.token_s, first_s=e.first_s)
            k = best_choice(self.curve, [optimistic], self.k_max).k
            e.can_win_at = held = (self.curve, price, k)
        return held[2]

    def probe(self, switch_s: Sequence[float]) -> Choice:
        """A drafter idle for its interval gets a draft of probe_k tokens, to refresh its
        estimates; the cheapest due drafter first. switch_s: the plan's (Switches.switch_s).

        A drafter is not probed while catching up would cost more than a target token: for a
        draft model on a CPU that is whenever it is more than a few tokens behind (a new
        prompt, or after prompt lookup ran), and there such probes cost more than they found.
        A drafter on trial is probed without waiting for its interval. No drafter is probed
        while the last losing probes are not yet paid for (PROBE_BUDGET): backing off per
        drafter alone (probe_every, 4 steps for a free drafter, doubling to max_probe_every),
        probes of a drafter that cannot pay cost several percent (docs/decisions.md)."""
        if self.budget.owes():
            return Choice(None, 0, 0.0)
        for e in sorted(self.estimates, key=lambda e: e.token_s):
            if (e.idle < e.interval and not e.trial) or e.offer.available == 0 or e.offer.preview:
                continue  # a previewed offer is judged in shadow, for free
            if not self.can_win(e):
                continue
            catch_up_s = self.catch_up_cost(e.token_s, e.offer.behind)
            if catch_up_s > self.curve.target(1):
                continue
            k = min(self.probe_k(e), e.offer.available)
            cost_s = catch_up_s + e.draft_s(k) + self.curve.target(k + 1)
            cost_s += switch_s[k] if switch_s else 0.0
            if not self.budget.affords(cost_s - self.curve.target(1)):
                continue
            self.budget.cost_s = cost_s
            self.probing = e.drafter
            return Choice(e.drafter, k, 0.0)
        return Choice(None, 0, 0.0)

    def probe_k(self, e: Estimate) -> int:
        """How many tokens a probe of e drafts: what would pay most were it right 90% of the
        time (winning_k) until probes have judged it (COLD_JUDGED), then were it right
        halfway between its estimate and always (at most 90%).

        At 90%, a probe can show that a drafter pays where only a long draft does, and at high
        acceptance the probe itself pays. But once judged, a drafter whose estimate fell by
        chance is probed rarely (PROBE_BUDGET), and a wide probe whose first token fails
        costs the most and judges one token as a narrow one does: probed halfway, such a
        drafter finds its way back (docs/decisions.md, probe width)."""
        if e.judged < COLD_JUDGED:
            return self.winning_k(e)
        hope = min(0.9, (1.0 + e.acceptance.alphas(e.offer.key, 1)[0]) / 2)
        hopeful = Option(e.drafter, [hope] * self.k_max, e.token_s, first_s=e.first_s)
        return best_choice(self.curve, [hopeful], self.k_max).k or self.winning_k(e)

    def observe(
        self,
        drafter: Drafter | None,
        k: int,
        n_accepted: int,
        t_draft: float,
        t_verify: float,
        unsure_end: bool = False,
        t_first: float = 0.0,
    ) -> None:
        # the curve prices replayed passes: what the one graph added is not its speed
        switched_s = self.switches.pass_switch_s(k + 1)
        # time passing pays back probes, at the prices held (as each probe's loss is priced)
        passed_s = self.curve.target(k + 1) + switched_s
        self.budget.repay(passed_s)
        scale = self.curve.observe_target(k + 1, t_verify - switched_s)
        self.switches.passed(k + 1)
        for e in self.estimates:
            e.idle += 1
            if e.learns_cost:  # a draft model slows down with the target: same device
                e.token_s *= scale
                e.first_s = None if e.first_s is None else e.first_s * scale
        self.drafted_by = drafter if k else None
        if drafter is None or k == 0:
            return
        e = self.estimate(drafter)
        e.idle = 0
        if e.learns_cost:
            self.learn_draft_cost(e, k, t_draft, t_first)
        e.acceptance.observe(e.offer.key, k, n_accepted, unsure_end)
        e.judged += k
        # a trial ends with its tokens, however they were judged: ended only by a probe, it
        # stayed open all request where plan drafted on after the first probes paid, and
        # each plain step plan chose later was a probe at once
        e.trial = e.trial and e.judged < TRIAL_TOKENS
        if self.probing is not drafter:
            return
        step_s = e.draft_s(k) + self.curve.target(k + 1)
        emitted_s = (n_accepted + 1) * self.curve.target(1)  # plain decoding's, at the prices held
        faster = emitted_s > step_s
        loss_s = self.budget.lost(emitted_s)
        paid = n_accepted == k or faster
        e.trial = e.trial and faster  # a slow probe ends it
        # owe what it lost (PROBE_BUDGET) and back off when probes keep failing, once a few
        # have judged it: owing from the first probe, a draft model right 90% of the time
        # whose first 2-token probe failed was left too far behind to probe again
        if e.judged >= COLD_JUDGED:
            self.budget.owe(loss_s)
            # paid: every token kept (a longer draft may pay more), or the step emitted faster
            # than plain decoding at the prices the policy holds (its curve and the drafter's
            # price: one pass's noise does not decide). Counting only the first, a probe
            # that kept 1 of 2 failed: at 90% acceptance 1 probe in 5 doubled the interval of
            # a drafter worth 2.5x
            e.interval = e.base_interval if paid else min(2 * e.interval, self.max_probe_every)

    def learn_draft_cost(self, e: Estimate, k: int, t_draft: float, t_first: float) -> None:
        """Follow e's price: its first token's seconds and its later tokens' apart, where the
        drafter measured the first (Draft.t_first), else every token alike."""
        smoothing = self.curve.smoothing
        if t_first <= 0.0:
            e.token_s = followed(e.token_s, t_draft / k, smoothing)
            return
        e.first_s = followed(e.first_s if e.first_s is not None else e.token_s, t_first, smoothing)
        if k > 1:
            e.token_s = followed(e.token_s, (t_draft - t_first) / (k - 1), smoothing)
