"""Which drafter and how many tokens to draft at each step.

FixedPolicy is the anchors' default (one drafter, fixed k). AdaptivePolicy (below) picks the
drafter and k that maximise expected tokens per second from a measured cost curve and online
acceptance estimates, and k = 0 (a plain step) when speculation would lose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
