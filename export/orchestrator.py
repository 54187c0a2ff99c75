"""`edgespec export`: options in, a verified bundle out, whatever the format.

The orchestrator owns what every format shares: the staging folder beside --out (moved into
place only when complete, so a failed export never leaves half a bundle), the bundle
manifest (tokenizer and policy sections), and the one tuning call. Each format has one
builder that writes its model files into the staging folder and describes them
(BuiltModels): export/gguf_bundle.py, export/onnx_bundle.py, export/trt_bundle.py (its
engines are built after the bundle is in place, where TensorRT and a GPU are: export/cli.py).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

from edgespec.bundle import Bundle, write_bundle
from edgespec.errors import EdgespecError
from edgespec.export.options import BuiltModels, ExportOptions
from edgespec.quant.policy import PrecisionChoice
from edgespec.runtimes.base import VocabInfo

log = logging.getLogger(__name__)

FORMATS = ("gguf", "onnx", "tensorrt")
Builder = Callable[[ExportOptions, Path, Path], BuiltModels]  # (opts, work_dir, staging)


def export_bundle(opts: ExportOptions) -> Path:
    """Build the bundle in a staging folder beside --out; move it into place when complete."""
    build = builder(opts.format)
    out = opts.out
    if out.exists() and any(out.iterdir()):
        raise EdgespecError(f"{out} exists and is not empty; choose a new --out folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as work:
        work_dir = Path(work)
        staging = work_dir / "bundle"
        staging.mkdir()
        built = build(opts, work_dir, staging)
        policy = policy_section(built.choice, opts) | built.policy
        bundle = Bundle(staging, built.entries, tokenizer_section(built.vocab), policy)
        if opts.tune:
            bundle = Bundle(staging, bundle.models, bundle.tokenizer, policy, tune(bundle))
        write_bundle(bundle)
        if out.exists():
            out.rmdir()  # empty, checked above
        staging.replace(out)
    return out


def builder(fmt: str) -> Builder:
    """The format's builder, imported only when asked for (each needs its own extra)."""
    if fmt == "gguf":
        from edgespec.export.gguf_bundle import build_gguf

        return build_gguf
    if fmt == "onnx":
        from edgespec.export.onnx_bundle import build_onnx

        return build_onnx
    if fmt == "tensorrt":
        from edgespec.export.trt_bundle import build_tensorrt

        return build_tensorrt
    raise EdgespecError(f"format {fmt!r} is not available; use {' or '.join(FORMATS)}")


def tune(bundle: Bundle) -> dict[str, object]:
    """The export's one tuning call: the cost curve of the bundle's own files, measured here
    and stored in bundle.json with the device and runtime it holds for (calibrate.py owns
    measuring, storing and describing)."""
    from edgespec.calibrate import tune_bundle

    return tune_bundle(bundle)


def tokenizer_section(vocab: VocabInfo) -> dict[str, object]:
    return {
        "type": vocab.vocab_type,
        "n_vocab": vocab.n_vocab,
        "bos_id": vocab.bos_id,
        "eos_id": vocab.eos_id,
        "eog_ids": sorted(vocab.eog_ids),
        "vocab_hash": vocab.token_text_hash,
    }


def policy_section(choice: PrecisionChoice, opts: ExportOptions) -> dict[str, object]:
    return {
        "device": opts.device,
        "target_quant": choice.target_quant,
        "draft_quant": choice.draft_quant,
        "output_tensor_type": choice.output_tensor_type,
        "reason": choice.reason,
        "forced": opts.force,
    }
