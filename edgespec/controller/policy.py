"""The Policy protocol the engine asks at each step, and FixedPolicy: one drafter, fixed k
(the anchors' default)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from edgespec.drafters.base import Drafter, Offer
from edgespec.sampling import SamplingParams


class Policy(Protocol):
    def begin(self, drafters: Sequence[Drafter], max_tokens: int | None = None) -> None:
        """A new request starts with these drafters and emits at most max_tokens (None: no
        bound known); per-request estimates reset."""
        ...

    def plan(
        self, context: Sequence[int], sp: SamplingParams, offers: Sequence[Offer]
    ) -> tuple[Drafter | None, int]:
        """The drafter to use and the number of tokens to draft (0 = plain step). offers:
        each drafter's Offer for context, in begin's order (the engine asks the drafters: a
        policy decides and never calls them)."""
        ...

    def to_sync(self, context: Sequence[int], offers: Sequence[Offer]) -> list[Drafter]:
        """Drafters for the engine to bring up to date with context now, each in one batched
        pass (asked when a request begins and before each step's plan; offers as plan's)."""
        ...

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
        """What the step cost and how many of the k drafted tokens the target kept;
        unsure_end: the drafter was not sure of the last (Draft.unsure_end); t_first: the
        part of t_draft its first token took (Draft.t_first; 0: not measured)."""
        ...

    def end(self) -> None:
        """The request is over (finished, stopped, cancelled or failed)."""
        ...


class FixedPolicy:
    """The drafter named `drafter` (None: none) drafts k tokens every step."""

    def __init__(self, drafter: str | None, k: int) -> None:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.drafter_name = drafter
        self.k = k if drafter else 0
        self.drafter: Drafter | None = None
        self.prefill = False  # whether the drafter still has the prompt to catch up on

    def begin(self, drafters: Sequence[Drafter], max_tokens: int | None = None) -> None:
        self.prefill = True
        if self.drafter_name is None:
            return
        named = [d for d in drafters if d.name == self.drafter_name]
        if not named:
            have = sorted(d.name for d in drafters)
            raise ValueError(f"no drafter named {self.drafter_name!r}; have {have}")
        self.drafter = named[0]

    def plan(
        self, context: Sequence[int], sp: SamplingParams, offers: Sequence[Offer]
    ) -> tuple[Drafter | None, int]:
        return self.drafter, self.k

    def to_sync(self, context: Sequence[int], offers: Sequence[Offer]) -> list[Drafter]:
        """Its drafter, once per request: the prompt, prefilled as the target's is (it drafts
        every step after that, so it never falls behind)."""
        due, self.prefill = self.prefill, False
        return [self.drafter] if due and self.drafter is not None and self.k else []

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
        pass

    def end(self) -> None:
        pass
