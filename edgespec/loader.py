"""From file paths and options to a ready SpeculativeDecoder: the Python API's front door."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from edgespec.bundle import is_bundle, read_bundle
from edgespec.calibrate import backend_names, calibrate, load_tuned, store_tuned, tune_key
from edgespec.controller import AdaptivePolicy, CostCurve, FixedPolicy, Policy
from edgespec.drafters import Drafter, ModelDrafter, NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import EdgespecError
from edgespec.runtimes import Runtime, RuntimeOptions, check_compatible, open_runtime

log = logging.getLogger(__name__)

DRAFTER_CHOICES = ("auto", "model", "ngram", "none")


@dataclass(frozen=True)
class SpecOptions:
    drafter: str = "auto"  # auto | model | ngram | none
    k: int | None = None  # None = chosen per step by the adaptive controller
    k_max: int = 16
    max_ngram: int = 4


def load_decoder(
    target: str | Path,
    draft: str | Path | None = None,
    spec: SpecOptions = SpecOptions(),
    runtime: RuntimeOptions = RuntimeOptions(),
) -> SpeculativeDecoder:
    if spec.drafter not in DRAFTER_CHOICES:
        raise EdgespecError(f"unknown drafter {spec.drafter!r}; choose one of {DRAFTER_CHOICES}")
    target, draft, tuned = resolve_bundle(target, draft)
    if spec.drafter == "model" and draft is None:
        raise EdgespecError("--drafter model needs a draft model: pass --draft DRAFT.gguf")
    target_rt = open_runtime(target, runtime)
    draft_rt = None
    if draft is not None and spec.drafter in ("auto", "model"):
        draft_rt = open_runtime(draft, runtime)
        check_compatible(target_rt.vocab_info(), draft_rt.vocab_info(), str(target), str(draft))
    drafters = make_drafters(spec, draft_rt)
    policy = make_policy(spec, drafters, target_rt, draft_rt, Path(target), draft, runtime, tuned)
    return SpeculativeDecoder(target_rt, drafters, policy)


def resolve_bundle(
    target: str | Path, draft: str | Path | None
) -> tuple[Path, Path | None, dict | None]:
    """Model paths from a bundle folder (verified) or as given; plus the bundle's tune data.
    An explicit draft wins over the bundle's."""
    if is_bundle(target):
        bundle = read_bundle(target)
        bundle_target = bundle.path("target")
        assert bundle_target is not None  # read_bundle refuses a bundle without one
        return bundle_target, Path(draft) if draft else bundle.path("draft"), bundle.tune
    return Path(target), Path(draft) if draft else None, None


def make_drafters(spec: SpecOptions, draft_rt: Runtime | None) -> list[Drafter]:
    drafters: list[Drafter] = []
    if draft_rt is not None:
        drafters.append(ModelDrafter(draft_rt))
    if spec.drafter in ("auto", "ngram"):
        drafters.append(NgramDrafter(max_ngram=spec.max_ngram))
    return drafters


def make_policy(
    spec: SpecOptions,
    drafters: list[Drafter],
    target_rt: Runtime,
    draft_rt: Runtime | None,
    target_path: Path,
    draft_path: str | Path | None,
    runtime: RuntimeOptions,
    tuned: dict | None = None,
) -> Policy:
    if spec.drafter == "none" or not drafters:
        return FixedPolicy(None, 0)
    if spec.k is not None and spec.drafter != "auto":
        return FixedPolicy(spec.drafter, spec.k)
    k_max = spec.k if spec.k is not None else spec.k_max
    key = tune_key(
        target_path,
        Path(draft_path) if draft_rt and draft_path else None,
        runtime_description(runtime, target_rt, draft_rt),
    )
    curve = load_tuned(key) or curve_from_bundle(tuned)
    if curve is None or len(curve.target_s) < k_max + 1:
        curve = calibrate(target_rt, draft_rt, n_max=k_max + 1)
        store_tuned(key, curve)
    return AdaptivePolicy(curve, k_max=k_max)


def curve_from_bundle(tuned: dict | None) -> CostCurve | None:
    """Tune data stored in a bundle by `edgespec export --tune` (measured where it was built)."""
    try:
        return CostCurve(list(tuned["target_s"]), float(tuned["draft_s"]))  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None


def runtime_description(opts: RuntimeOptions, target: Runtime, draft: Runtime | None) -> str:
    """Which back-ends, threads and offload a cost curve was measured with."""
    return f"{backend_names(target, draft)} threads={opts.n_threads} gpu_layers={opts.n_gpu_layers}"
