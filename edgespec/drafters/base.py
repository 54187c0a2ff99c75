"""The Drafter protocol: everything the engine and the policy need from a drafter.

The policy never asks what kind of drafter it holds: it prices every drafter from what the
drafter says (Offer, token_s) and learns its acceptance with the estimator the drafter
supplies. A drafter's `name` labels stats and selects it for FixedPolicy; nothing branches
on it.
"""

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
    # drafted under the Gumbel-max coupling (the request's position-keyed noise; q unused):
    # verified by equality with the target's own Gumbel-max token (verify.verify_gumbel)
    gumbel: bool = False
    # the drafter was not sure of its last token and stopped there (ModelDrafter's confidence)
    unsure_end: bool = False
    # seconds of the pass that drafted the first token (the re-read of the target's last
    # token included, catch-up not): a draft model's first pass costs more than the rest
    # (controller.draft_s); 0 = not measured, every token priced alike
    t_first: float = 0.0

    @staticmethod
    def empty() -> Draft:
        return Draft(np.zeros(0, dtype=np.int32), None)


@dataclass(frozen=True)
class Offer:
    """What a proposal would hold if asked now: the policy prices it before choosing k."""

    available: int  # the most tokens a proposal can hold (0: nothing to propose)
    key: int = 0  # which acceptance estimate applies (prompt lookup: the match length)
    behind: int = 0  # context tokens to forward before drafting (catching up after idle steps)
    # the proposal's first tokens, where the drafter knows them without work (prompt lookup):
    # the policy checks them against what the target emits, learning their acceptance without
    # a verify pass (a shadow draft); () where finding them costs a forward pass
    preview: tuple[int, ...] = ()


class Acceptance(Protocol):
    """An online estimate of how often the target keeps a drafter's tokens: learned within a
    request, and from one request to the next (the policy keeps one per drafter)."""

    def alphas(self, key: int, n: int) -> list[float]:
        """Acceptance probability at draft positions 1..n, each given all before it passed."""
        ...

    def alphas_sure(self, key: int, n: int) -> list[float]:
        """Acceptance at positions 1..n of a token the drafter was sure of (one it drafted
        on from); the same as alphas for a drafter that always drafts the k asked."""
        ...

    def continues(self, key: int, n: int) -> list[float]:
        """Probability the drafter is sure of its token at position 1..n, so goes on past it,
        given it got there (1.0 for a drafter that always drafts the k asked)."""
        ...

    def observe(self, key: int, k: int, n_accepted: int, unsure_end: bool = False) -> None:
        """The target kept n_accepted of k tokens drafted under `key`; unsure_end: the
        drafter was not sure of the last (Draft.unsure_end)."""
        ...

    def next_request(self) -> None:
        """Start a new request's estimates from what every request so far has shown."""
        ...

    def outcomes(self) -> dict[str, tuple[int, int]]:
        """What every request so far has shown, as (kept, judged) counts by name: what
        recall takes back in another process (edgespec/lessons.py)."""
        ...

    def recall(self, outcomes: dict[str, tuple[int, int]]) -> None:
        """Add counts an earlier process kept (outcomes()), names it does not keep passed
        over, and start the next request from them (next_request)."""
        ...


class Drafter(Protocol):
    name: str  # a label for stats and for choosing it by name (FixedPolicy, --drafter)

    @property
    def token_s(self) -> float | None:
        """Seconds per drafted token, the policy's starting estimate: 0 = free (prompt
        lookup; never learned), None = unknown (learned from the first drafts), else learned
        on from there."""
        ...

    def offer(self, context: Sequence[int]) -> Offer:
        """What a proposal for this context would hold; no side effect on the next proposal."""
        ...

    def acceptance(self) -> Acceptance:
        """A fresh acceptance estimate with this drafter's priors (kept by the policy from
        request to request)."""
        ...

    def propose(self, context: Sequence[int], k: int, sp: SamplingParams) -> Draft:
        """Up to k tokens to follow context (prompt + everything emitted so far)."""
        ...

    def sync(self, context: Sequence[int]) -> None:
        """Catch up on context now, in one batched pass, so the next proposal starts in step
        (the policy asks this of a priced drafter that idle steps left behind)."""
        ...

    def reset(self, rng: np.random.Generator) -> None:
        """A new request: forget the previous one; draw any random choice from rng (a stream
        of its own, so draft draws never repeat the verifier's)."""
        ...
