"""From file paths and options to a ready SpeculativeDecoder: the Python API's front door."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgespec.backends import RuntimeOptions
from edgespec.controller import AdaptivePolicy, CostCurve, FixedPolicy, Policy
from edgespec.controller.calibrate import cost_curve, tune_key
from edgespec.controller.lessons import LessonStore
from edgespec.drafters import Drafter, HeadDrafter, ModelDrafter, NgramDrafter
from edgespec.drafters.model import STEP_SHAPES
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import EdgespecError
from edgespec.pair import ModelPair, open_pair
from edgespec.runtime import K_MAX

log = logging.getLogger(__name__)

DRAFTER_CHOICES = ("auto", "model", "eagle", "mtp", "ngram", "none")
# The draft model stops at a token it is less sure of: the best of 0.5-0.8 (docs/decisions.md)
DRAFT_CONFIDENCE = 0.7


@dataclass(frozen=True)
class SpecOptions:
    """Which drafters run and how k is decided: the one place for both.

    k = None: the adaptive controller chooses k per step (0 = plain), up to k_max, and with
    drafter "auto" also which drafter (the draft model, the draft head, prompt lookup, or
    none). k = N: drafter "model", "eagle" (the draft head, --head), "mtp" (the target's
    own MTP layer) or "ngram" drafts N
    tokens every step (N = 0: plain decoding); "auto" chooses per step, so it refuses a
    fixed k.
    """

    drafter: str = "auto"  # auto | model | eagle | mtp | ngram | none
    k: int | None = None  # fixed draft length; None = chosen per step
    k_max: int = K_MAX  # longest draft the adaptive controller tries
    max_ngram: int = 4
    # prompt lookup also in the completions of the last N requests (a server's; 0 = off)
    lookup_history: int = 0
    # k chosen per step: a greedy draft model's draft ends at its first token it gives less
    # than this probability, a seeded (Gumbel) one where its token wins by a smaller margin
    # than that probability against one rival would give (ModelDrafter's confidence; 0 =
    # off). None: DRAFT_CONFIDENCE where k is chosen per step; a fixed k is drafted whole,
    # so it refuses a confidence.
    draft_confidence: float | None = None

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTER_CHOICES:
            raise EdgespecError(
                f"unknown drafter {self.drafter!r}; choose one of {', '.join(DRAFTER_CHOICES)}"
            )
        if self.k is not None and self.k < 0:
            raise EdgespecError(f"--k must be >= 0, got {self.k}")
        if self.lookup_history < 0:
            raise EdgespecError(f"--lookup-history must be >= 0, got {self.lookup_history}")
        for flag, value in (("--k", self.k), ("--k-max", self.k_max)):
            if value is not None and value > K_MAX:
                raise EdgespecError(
                    f"{flag} {value} is more than {K_MAX}, the longest draft edgespec verifies "
                    f"(its widest pass, {K_MAX + 1} tokens, is the widest CUDA graph captured); "
                    f"use {flag} {K_MAX} or less"
                )
        if self.k_max < 1:
            raise EdgespecError(f"--k-max must be >= 1, got {self.k_max}")
        if self.draft_confidence is not None and not 0.0 <= self.draft_confidence < 1.0:
            raise EdgespecError(
                f"--draft-confidence must be in [0, 1) (0: drafts of the k asked for), got "
                f"{self.draft_confidence}"
            )
        if self.draft_confidence is not None and self.k is not None:
            raise EdgespecError(
                f"--draft-confidence ends drafts early, but --k {self.k} drafts {self.k} tokens "
                "every step; drop --draft-confidence, or use --k auto"
            )
        if self.k is not None and self.drafter == "auto":
            raise EdgespecError(
                f"--k {self.k} fixes the draft length, which needs one drafter: add --drafter "
                "model, eagle, mtp or ngram (with --drafter auto, k is chosen per step up to "
                "--k-max)"
            )

    def within(self, n_ctx: int) -> SpecOptions:
        """These options with k and k_max cut to what a context of n_ctx tokens can use (a
        draft and its verify pass beside the prompt: at most half of it),
        with a warning when cut."""
        limit = max(1, n_ctx // 2)
        changes: dict[str, Any] = {}
        for name in ("k", "k_max"):
            value = getattr(self, name)
            if value is not None and value > limit:
                log.warning(
                    "--%s %d is more than is useful here (at most %d with a %d-token context); "
                    "using %d",
                    name.replace("_", "-"), value, limit, n_ctx, limit,
                )  # fmt: skip
                changes[name] = limit
        return replace(self, **changes) if changes else self

    @property
    def adaptive(self) -> bool:
        return self.k is None and self.drafter != "none"

    @property
    def confidence(self) -> float:
        """The draft model's confidence threshold these options give (0: off)."""
        if not self.adaptive:
            return 0.0
        return DRAFT_CONFIDENCE if self.draft_confidence is None else self.draft_confidence

    @property
    def uses_model(self) -> bool:
        return self.drafter in ("auto", "model")

    @property
    def uses_head(self) -> bool:
        return self.drafter in ("auto", "eagle")

    @property
    def uses_mtp(self) -> bool:
        return self.drafter in ("auto", "mtp")

    @property
    def longest_draft(self) -> int:
        """The most draft tokens one step verifies (0: plain decoding)."""
        if self.drafter == "none":
            return 0
        return self.k if self.k is not None else self.k_max


def load_decoder(
    target: str | Path,
    draft: str | Path | None = None,
    spec: SpecOptions = SpecOptions(),
    runtime: RuntimeOptions = RuntimeOptions(),
    *,
    head: str | Path | None = None,
    reuse_cache: bool = False,
    capture_graphs: bool = False,
    remember: bool = False,
) -> SpeculativeDecoder:
    """target: a GGUF file, an exported ONNX folder or a bundle folder; draft likewise, head
    an EAGLE-3 head's GGUF file for the target (a bundle brings its own of each).
    reuse_cache: keep the KV caches across requests (see SpeculativeDecoder).
    capture_graphs, remember: see build_decoder."""
    runtime = replace(runtime, rollback=spec.longest_draft)  # a hybrid's state snapshots
    pair = open_pair(
        target, draft, runtime, open_draft=spec.uses_model, head=head,
        use_head=spec.uses_head, use_mtp=spec.uses_mtp,
    )  # fmt: skip
    if spec.drafter == "model" and pair.draft is None:
        raise EdgespecError("--drafter model needs a draft model: pass --draft DRAFT.gguf")
    if spec.drafter == "eagle" and pair.head is None:
        raise EdgespecError(
            "--drafter eagle needs a draft head: pass --head HEAD.gguf (an EAGLE-3 head "
            "trained for the target)"
        )
    problem = pair.target.mtp_problem
    if spec.drafter == "mtp" and problem:
        raise EdgespecError(
            f"--drafter mtp: {problem}; convert the model again with its MTP layers, or choose "
            "another --drafter"
        )
    if spec.drafter == "auto" and problem:
        log.warning("%s; drafting without its MTP layers", problem)
    if spec.drafter == "mtp" and pair.head is None:  # no EAGLE-3 head opens for mtp
        raise EdgespecError(
            pair.target.mtp_refused
            or f"--drafter mtp needs a target with MTP layers: {pair.target_path.name} has "
            "none this llama.cpp drafts with (GLM-4.5, GLM-4.7-Flash and Qwen3.5 GGUFs keep "
            "theirs, DeepSeek-V3's do not); choose another --drafter"
        )
    return build_decoder(
        pair, spec, reuse_cache=reuse_cache, capture_graphs=capture_graphs, remember=remember
    )


def build_decoder(
    pair: ModelPair,
    spec: SpecOptions,
    *,
    reuse_cache: bool = False,
    capture_graphs: bool = False,
    remember: bool = False,
) -> SpeculativeDecoder:
    """The decoder for an opened pair: its cost curve (adaptive k), drafters and policy;
    reuse_cache keeps the target's and the draft model's KV caches across requests;
    capture_graphs runs every step shape the loop can use once now, where a runtime
    captures a CUDA graph per shape on first use (ONNX Runtime on CUDA), so that no request
    pays a capture (a server's choice: the target's 17 widths and the draft's two shapes
    take seconds, which a one-off request would mostly not use).
    remember: the adaptive controller starts from what earlier processes learned of these
    models' drafters on this runtime and device, and keeps what this one learns
    (edgespec/controller/lessons.py): each `edgespec run` is a process's first request."""
    spec = speculation_that_can_pay(spec, pair)
    draft_ctx = pair.draft.n_ctx if pair.draft is not None and spec.uses_model else None
    spec = spec.within(min(pair.target.n_ctx, draft_ctx or pair.target.n_ctx))
    key = tune_key(pair) if spec.adaptive else None  # the tune store's, and the lessons'
    curve = cost_curve(pair, n_max=spec.k_max + 1, key=key) if spec.adaptive else None
    drafters = make_drafters(spec, pair, curve, keep_cache=reuse_cache)
    store = LessonStore(key) if remember and key is not None else None
    policy = make_policy(spec, drafters, curve, store)
    if capture_graphs:
        capture_loop_graphs(pair, spec, drafters)
    return SpeculativeDecoder(pair.target, drafters, policy, reuse_cache=reuse_cache)


def speculation_that_can_pay(spec: SpecOptions, pair: ModelPair) -> SpecOptions:
    """Plain decoding for a target whose state cannot be rolled back cheaply (a recurrent
    model llama.cpp keeps no state snapshots for): every rejected draft would re-read the
    whole context. --drafter auto falls back with a warning; a drafter named is refused."""
    if spec.drafter == "none" or pair.target.max_rollback != 0:
        return spec
    why = (
        f"{pair.target_path.name} keeps a recurrent state that this llama.cpp cannot roll "
        "back (no state snapshots for its architecture), so every rejected draft would "
        "re-read the whole context"
    )
    if spec.drafter != "auto":
        raise EdgespecError(f"{why}; use --drafter none")
    log.warning("%s: decoding without speculation", why)
    return replace(spec, drafter="none")


def capture_loop_graphs(pair: ModelPair, spec: SpecOptions, drafters: list[Drafter]) -> int:
    """Capture the graphs of the step shapes the loop can run (Runtime.capture_graphs): the
    target's plain steps and verify passes of up to k_max + 1 tokens (a fixed k: k + 1; a
    draft may be shorter), every row; a draft model's proposals (model.STEP_SHAPES).
    Returns how many."""
    longest = (spec.k_max if spec.k is None else spec.k) + 1 if drafters else 1
    captured = pair.target.capture_graphs([(n, n) for n in range(1, longest + 1)])
    if pair.draft is not None and spec.uses_model:
        captured += pair.draft.capture_graphs(STEP_SHAPES)
    if captured:
        log.info("captured %d CUDA graphs for the loop's step shapes", captured)
    return captured


def make_drafters(
    spec: SpecOptions, pair: ModelPair, curve: CostCurve | None, *, keep_cache: bool = False
) -> list[Drafter]:
    drafters: list[Drafter] = []
    if pair.draft is not None and spec.uses_model:
        token_s = curve.draft_s if curve else None
        drafters.append(
            ModelDrafter(
                pair.draft,
                token_s=token_s,
                keep_cache=keep_cache,
                confidence=spec.confidence,
                n_ids=pair.target.n_vocab,
            )
        )
    head = pair.head  # its cost is learned from its drafts
    if head is not None and spec.drafter in ("auto", head.kind):
        drafters.append(HeadDrafter(pair.target, head))
    if spec.drafter in ("auto", "ngram"):
        drafters.append(NgramDrafter(max_ngram=spec.max_ngram, history=spec.lookup_history))
    return drafters


def make_policy(
    spec: SpecOptions,
    drafters: list[Drafter],
    curve: CostCurve | None,
    store: LessonStore | None = None,
) -> Policy:
    """store: where the adaptive controller's lessons are kept between processes (None: not)."""
    if not drafters:
        return FixedPolicy(None, 0)
    if curve is None:
        return FixedPolicy(spec.drafter, spec.k or 0)
    return AdaptivePolicy(curve, k_max=spec.k_max, store=store)
