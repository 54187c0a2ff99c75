"""What the adaptive policy knows of each drafter: its Estimate (price, acceptance, when it
last ran), what it keeps from request to request (Learned) and from process to process
(lesson_of), and a previewed draft judged in shadow by the emitted tokens (Shadow)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from edgespec.controller.lessons import Lesson, LessonStore
from edgespec.controller.pricing import CostCurve, draft_s
from edgespec.drafters.base import Acceptance, Drafter, Offer

# Right tokens that judge a shadow: one chance match must not turn drafting on
SHADOW_JUDGED_AFTER = 2


@dataclass(frozen=True)
class Shadow:
    """A draft a drafter would have proposed at context length `at` (its offer's preview),
    judged by the tokens the target emits there instead of by a verify pass: a drafted token
    is accepted exactly when it equals the target's own choice (greedy, or Gumbel-max), and
    with the same probability p(x) under rejection sampling of a point mass.

    Judged at the first wrong token or after SHADOW_JUDGED_AFTER right ones, then cast
    afresh: waiting for the whole preview (16 tokens) kept a copy undrafted for its first 17
    tokens wherever a new match's prior lost: a 1% change of the curve's 2-token ratio cost
    8% on edit and 16% on code (bench/replay.py --believed). Per token, the acceptance
    learned is the same, only sooner."""

    at: int
    tokens: tuple[int, ...]
    key: int

    def outcome(self, context: Sequence[int]) -> tuple[int, int] | None:
        """(k, n_accepted) over the tokens emitted since it was cast, once one is wrong or
        SHADOW_JUDGED_AFTER are right; None before."""
        emitted = context[self.at : self.at + len(self.tokens)]
        for i, (drafted, chosen) in enumerate(zip(self.tokens, emitted)):
            if drafted != chosen:
                return i + 1, i
        judged = len(emitted) >= min(SHADOW_JUDGED_AFTER, len(self.tokens))
        return (len(emitted), len(emitted)) if judged else None


@dataclass
class Estimate:
    """What the policy knows of one drafter: its price and acceptance (both kept across
    requests: Learned) and when it last ran (per request)."""

    drafter: Drafter
    token_s: float  # seconds per drafted token after the first
    learns_cost: bool  # False for a free drafter: its microseconds are the loop's
    acceptance: Acceptance
    offer: Offer = Offer(0)  # at the last plan
    shadow: Shadow | None = None  # a preview awaiting the tokens that judge it
    idle: int = 0  # steps since it last ran
    base_interval: int = 16  # steps idle before a probe
    interval: int = 16  # grows while probes fail to pay
    judged: int = 0  # drafted tokens verify passes judged, over every request so far
    first_s: float | None = None  # seconds of a draft's first token, once measured
    trial: bool = False  # never judged: probed step after step while probes pay (TRIAL_TOKENS)

    def draft_s(self, k: int) -> float:
        return draft_s(self.first_s, self.token_s, k)

    # can_win's last answer: the curve and the price in its one-token passes it was for
    can_win_at: tuple[CostCurve, float, int] | None = None  # and the k it wins at (0: none)

    @property
    def free(self) -> bool:
        return not self.learns_cost and self.token_s == 0.0


def lesson_of(e: Estimate) -> Lesson:
    """What an estimate keeps for a later process: its acceptance's counts, judged tokens,
    and a first token's price over the others' where both are learned."""
    first_s = e.first_s if e.learns_cost and e.token_s > 0.0 else None
    ratio = None if first_s is None else first_s / e.token_s
    return Lesson(e.judged, e.acceptance.outcomes(), ratio)


def priors(drafter: Drafter) -> Learned:
    """What the policy knows of a drafter nothing has judged: its own price and priors."""
    return Learned(drafter.token_s or 0.0, drafter.token_s != 0.0, drafter.acceptance())


@dataclass
class Learned:
    """What the policy keeps of a drafter from one request to the next."""

    token_s: float
    learns_cost: bool
    acceptance: Acceptance  # starts each request from every earlier one's outcomes
    judged: int = 0  # Estimate.judged
    first_s: float | None = None  # Estimate.first_s


def taught(estimates: Sequence[Estimate]) -> dict[int, Learned]:
    """What a request has taught of each drafter, by id(drafter)."""
    return {id(e.drafter): Learned(e.token_s, e.learns_cost, e.acceptance, e.judged,
                                   e.first_s) for e in estimates}  # fmt: skip


class Memory:
    """What the policy knows of drafters beyond one request: what this process's earlier
    requests taught (learned, by id(drafter)), and what earlier processes did (the lesson
    store's, by name, read when the policy is made; None: nothing kept)."""

    def __init__(self, store: LessonStore | None) -> None:
        self.store = store
        self.recalled = store.recall() if store else {}
        self.learned: dict[int, Learned] = {}  # id(drafter) -> what earlier requests taught

    def known(self, drafter: Drafter) -> Learned | None:
        """What earlier requests, else earlier processes, taught of drafter (None: nothing)."""
        return self.learned.get(id(drafter)) or self.remembered(drafter)

    def remembered(self, drafter: Drafter) -> Learned | None:
        """What earlier processes taught of a drafter of this name (None: nothing): its
        acceptance, judged tokens and its first token's price relative to its others'; its
        price starts where a new drafter's does (the calibration's)."""
        lesson = self.recalled.get(drafter.name)
        if lesson is None:
            return None
        known = priors(drafter)
        known.acceptance.recall(lesson.outcomes)
        known.judged = lesson.judged
        if lesson.first_ratio and known.token_s:
            known.first_s = known.token_s * lesson.first_ratio
        return known

    def keep(self, estimates: Sequence[Estimate]) -> None:
        """Keep what a request taught for a later process (this one's next request takes it
        from the estimates: AdaptivePolicy.begin)."""
        if self.store is not None and estimates:
            self.store.keep({e.drafter.name: lesson_of(e) for e in estimates})
