"""Open a target and its draft, and check that the draft may draft for it: the one place.

A path is a model file (GGUF), an exported ONNX folder, or a bundle folder (bundle.json),
whose models are verified and whose stored tune data comes along.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from edgespec.backends import RuntimeOptions, is_model_folder, open_runtime
from edgespec.bundle import is_bundle, read_bundle
from edgespec.errors import EdgespecError
from edgespec.runtime import Runtime, check_compatible


@dataclass(frozen=True)
class ModelPair:
    target: Runtime
    draft: Runtime | None
    target_path: Path
    draft_path: Path | None  # None when no draft was opened
    options: RuntimeOptions
    bundle_tune: dict | None = None  # the cost curve a bundle carries (`export --tune`)

    def backend_names(self) -> str:
        """ "LlamaCppRuntime+OnnxRuntime": the back-ends of the target and its draft."""
        return "+".join(type(rt).__name__ for rt in (self.target, self.draft) if rt is not None)

    def runtime_description(self) -> str:
        """Which back-ends, device, threads and offload a cost curve is measured with."""
        o = self.options
        return (
            f"{self.backend_names()} device={o.device} threads={o.n_threads} "
            f"gpu_layers={o.gpu_layers()}"
            + (" exact" if o.exact else "")
            + (" one-graph" if self.target.keeps_one_graph else "")  # a curve with switch_s
        )


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


def open_pair(
    target: str | Path,
    draft: str | Path | None,
    options: RuntimeOptions = RuntimeOptions(),
    *,
    open_draft: bool = True,
) -> ModelPair:
    """Open the target, and the draft (given, or the bundle's) unless open_draft is False;
    refuse a draft whose vocabulary differs from the target's (VocabularyMismatchError)."""
    target_path, draft_path, tune = resolve_bundle(target, draft)
    target_rt = open_runtime(target_path, options)
    kept = target_rt.logit_ids
    if kept is not None:
        raise EdgespecError(
            f"{target_path} keeps {len(kept):,} of {target_rt.n_vocab:,} token ids in its "
            "output layer (exported as a draft, --draft-vocab), so it can only draft: pass it "
            "as --draft, and a model exported in full as --target"
        )
    if draft_path is None or not open_draft:
        return ModelPair(target_rt, None, target_path, None, options, tune)
    # batch-invariant kernels matter for the target alone: the draft keeps the fast ones; and
    # a draft on ONNX Runtime has fixed threads whatever the target's llama.cpp is told
    fixed = not options.load_aware_threads and not is_model_folder(Path(draft_path))
    draft_options = replace(options, exact=False, load_aware_threads=not fixed)
    draft_rt = open_runtime(draft_path, draft_options)
    check_compatible(
        target_rt.vocab_info(), draft_rt.vocab_info(), str(target_path), str(draft_path)
    )
    return ModelPair(target_rt, draft_rt, target_path, draft_path, options, tune)
