"""Open a target, its draft and its draft head, and check that each may draft for it: the one
place.

A path is a model file (GGUF), an exported ONNX folder, or a bundle folder (bundle.json),
whose models (target, draft, head) are verified and whose stored tune data comes along.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from edgespec.backends import RuntimeOptions, is_model_folder, open_runtime, starts_with
from edgespec.bundle import is_bundle, read_bundle
from edgespec.errors import EdgespecError, ModelFileError
from edgespec.runtime import DraftHead, Runtime, check_compatible

HEAD_FIX = "give the head's .gguf file"
GGUF_MAGIC = b"GGUF"
ONNX_HEAD_JSON = "head.json"  # an ONNX head folder's (export/eagle3_onnx.py)


@dataclass(frozen=True)
class ModelPair:
    target: Runtime
    draft: Runtime | None
    target_path: Path
    draft_path: Path | None  # None when no draft was opened
    options: RuntimeOptions
    bundle_tune: dict | None = None  # the cost curve a bundle carries (`export --tune`)
    # a draft head reading the target's states: an EAGLE-3 head, or the target's MTP layer
    head: DraftHead | None = None
    head_path: Path | None = None  # the EAGLE-3 head's file; None for none or an MTP layer

    def backend_names(self) -> str:
        """ "LlamaCppRuntime+OnnxRuntime": the back-ends of the target and its draft."""
        return "+".join(type(rt).__name__ for rt in (self.target, self.draft) if rt is not None)

    def runtime_description(self) -> str:
        """Which back-ends, device, threads and offload a cost curve is measured with."""
        o = self.options
        return (
            f"{self.backend_names()} device={o.device} threads={o.n_threads} "
            f"gpu_layers={o.gpu_layers()}"
            + (" exact" if self.target.batch_invariant else "")
            + (" one-graph" if self.target.keeps_one_graph else "")  # a curve with switch_s
        )


@dataclass(frozen=True)
class ModelPaths:
    """What a target argument names: its model files and the tune data a bundle carries."""

    target: Path
    draft: Path | None
    head: Path | None = None
    tune: dict | None = None


def resolve_bundle(
    target: str | Path, draft: str | Path | None, head: str | Path | None = None
) -> ModelPaths:
    """Model paths from a bundle folder (verified) or as given; plus the bundle's tune data.
    An explicit draft or head wins over the bundle's."""
    if is_bundle(target):
        bundle = read_bundle(target)
        bundle_target = bundle.path("target")
        assert bundle_target is not None  # read_bundle refuses a bundle without one
        return ModelPaths(
            bundle_target,
            Path(draft) if draft else bundle.path("draft"),
            Path(head) if head else bundle.path("head"),
            bundle.tune,
        )
    return ModelPaths(Path(target), Path(draft) if draft else None, Path(head) if head else None)


def check_head_path(path: Path) -> None:
    """Refuse, before any model loads, a --head that names nothing, or a folder that is not
    an ONNX head's; the head's kind and fit are the target's to judge (Runtime.open_head)."""
    if not path.exists():
        raise ModelFileError(f"draft head not found: {path}; check the --head path")
    if path.is_dir() and (path / ONNX_HEAD_JSON).is_file():
        return  # an ONNX head folder (export --format onnx --head): its target judges it
    if path.is_dir():
        raise ModelFileError(
            f"--head {path} is a folder (a Hugging Face checkpoint?): run and serve take a "
            "GGUF head; convert it with `edgespec export --target TARGET --head "
            f"{path} --out BUNDLE`, or {HEAD_FIX}"
        )
    if not starts_with(path, GGUF_MAGIC):
        raise ModelFileError(
            f"--head {path} is not a GGUF file: only GGUF heads are accepted yet; {HEAD_FIX}"
        )


def open_head(target: Runtime, target_path: Path, head_path: Path) -> DraftHead:
    """The head on this target, where the target's back-end can run one (hidden_states)."""
    if not target.hidden_states:
        raise EdgespecError(
            f"--head {head_path}: {target_path} outputs no hidden states for a head to read "
            f"({type(target).__name__}); give the target as a GGUF file, or export an ONNX "
            "bundle with the head (edgespec export --format onnx --head), or drop --head"
        )
    return target.open_head(str(head_path))


def open_pair(
    target: str | Path,
    draft: str | Path | None,
    options: RuntimeOptions = RuntimeOptions(),
    *,
    open_draft: bool = True,
    head: str | Path | None = None,
    use_head: bool = True,
    use_mtp: bool = False,
) -> ModelPair:
    """Open the target, the draft (given, or the bundle's) unless open_draft is False, and
    the head (given, or the bundle's) unless use_head is False; refuse a draft whose
    vocabulary differs from the target's (VocabularyMismatchError) and a head that does not
    fit the target (its hidden size, extract layers, vocabulary) or its back-end. use_mtp:
    where no EAGLE-3 head is opened, the target's MTP layer is the head if it has one (the
    target then loads it: one layer's memory)."""
    paths = resolve_bundle(target, draft, head)
    target_path, draft_path, tune = paths.target, paths.draft, paths.tune
    head_path = paths.head if use_head else None
    if head_path is not None:
        check_head_path(head_path)
    use_mtp = use_mtp and head_path is None
    target_rt = open_runtime(target_path, replace(options, mtp=use_mtp))
    kept = target_rt.logit_ids
    if kept is not None:
        raise EdgespecError(
            f"{target_path} keeps {len(kept):,} of {target_rt.n_vocab:,} token ids in its "
            "output layer (exported as a draft, --draft-vocab), so it can only draft: pass it "
            "as --draft, and a model exported in full as --target"
        )
    head_rt = open_head(target_rt, target_path, head_path) if head_path is not None else None
    if use_mtp and target_rt.mtp_layers:
        head_rt = target_rt.open_mtp()
    if draft_path is None or not open_draft:
        return ModelPair(target_rt, None, target_path, None, options, tune, head_rt, head_path)
    # batch-invariant kernels matter for the target alone: the draft keeps the fast ones; and
    # a draft on ONNX Runtime has fixed threads whatever the target's llama.cpp is told
    fixed = not options.load_aware_threads and not is_model_folder(Path(draft_path))
    draft_options = replace(
        options, exact=False, load_aware_threads=not fixed, backend_sampling=False
    )
    draft_rt = open_runtime(draft_path, draft_options)
    check_compatible(
        target_rt.vocab_info(), draft_rt.vocab_info(), str(target_path), str(draft_path)
    )
    return ModelPair(
        target_rt, draft_rt, target_path, draft_path, options, tune, head_rt, head_path
    )
