"""The Drafter protocol and the Draft it returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from edgespec.sampling import SamplingParams


@dataclass(frozen=True)
class Draft:
    tokens: np.ndarray  # [k] int32
    q: np.ndarray | None  # [k, V] float32: what each token was drawn from; None = point mass
    # seconds spent catching up on context the drafter had not seen since it last ran (beyond
    # the one token every step re-forwards): a one-off when a drafter resumes after idle
    # steps, so the policy leaves it out of the per-token draft cost
    t_catch_up: float = 0.0

    @staticmethod
    def empty() -> Draft:
        return Draft(np.zeros(0, dtype=np.int32), None)


class Drafter(Protocol):
    name: str

    def propose(self, context: Sequence[int], k: int, sp: SamplingParams) -> Draft:
        """Up to k tokens to follow context (prompt + everything emitted so far)."""
        ...

    def accept(self, n_accepted: int) -> None:
        """How many of the last proposal the target kept (for drafters that learn from it)."""
        ...

    def reset(self) -> None:
        """Forget everything about the previous request."""
        ...
