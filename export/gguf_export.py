"""`edgespec export --format gguf`: HF folder or GGUF in, a verified bundle of GGUF files out.

Sources are converted to a float GGUF first (HF folders through the gguf package's writer,
see hf_to_gguf.py); llama.cpp's own quantizer then writes the target and the draft at the
precisions the policy chose. The bundle is built in a staging folder beside --out and moved
into place at the end, so a failed export never leaves half a bundle.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from edgespec.quant.gguf_quant import quantize_gguf, weight_errors
from edgespec.quant.policy import PrecisionChoice, resolve_precision
from edgespec.quant.reference import error_summary
from edgespec.runtimes.base import VocabInfo, check_compatible
from edgespec.runtimes.llamacpp import LlamaCppRuntime

from edgespec.bundle import Bundle, ModelEntry, sha256_file, write_bundle
from edgespec.errors import EdgespecError, ModelFileError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportOptions:
    target: Path
    out: Path
    draft: Path | None = None
    format: str = "gguf"
    target_quant: str | None = None  # None: the device's default (quant/policy.py)
    draft_quant: str | None = None
    output_tensor_type: str | None = None
    device: str = "cpu"
    force: bool = False  # allow a draft stored below the target's precision
    tune: bool = False  # measure the cost curve and store it in the bundle
    threads: int | None = None
    int4_block: int = 128  # --format onnx: weights per INT4 scale (32 or 128)


def export_bundle(opts: ExportOptions) -> Path:
    """Build the bundle in a staging folder beside --out; move it into place when complete."""
    if opts.format not in ("gguf", "onnx"):
        raise EdgespecError(f"format {opts.format!r} is not available; use gguf or onnx")
    out = opts.out
    if out.exists() and any(out.iterdir()):
        raise EdgespecError(f"{out} exists and is not empty; choose a new --out folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as work:
        work_dir = Path(work)
        staging = work_dir / "bundle"
        staging.mkdir()
        if opts.format == "onnx":
            from edgespec.export.onnx_bundle import build_onnx_bundle

            bundle = build_onnx_bundle(opts, staging)
        else:
            bundle = build_gguf_bundle(opts, work_dir, staging)
        if opts.tune:
            bundle = Bundle(staging, bundle.models, bundle.tokenizer, bundle.policy, tune(bundle))
        write_bundle(bundle)
        if out.exists():
            out.rmdir()  # empty, checked above
        staging.replace(out)
    return out


def build_gguf_bundle(opts: ExportOptions, work_dir: Path, staging: Path) -> Bundle:
    sources = {"target": float_gguf(opts.target, work_dir, "target")}
    if opts.draft is not None:
        sources["draft"] = float_gguf(opts.draft, work_dir, "draft")
    infos = {role: read_vocab(path) for role, path in sources.items()}
    if "draft" in infos:  # refuse before spending minutes on quantization
        check_compatible(infos["target"][0], infos["draft"][0], str(opts.target), str(opts.draft))
    n_vocab = infos["target"][0].n_vocab
    choice = resolve_precision(
        opts.device,
        n_vocab,
        opts.target_quant,
        opts.draft_quant,
        opts.output_tensor_type,
        opts.force,
    )
    log.info("precision: %s / %s (%s)", choice.target_quant, choice.draft_quant, choice.reason)
    entries = tuple(
        quantize_role(role, src, staging, choice, opts.threads, infos[role])
        for role, src in sources.items()
    )
    errors = {
        m.role: error_summary(weight_errors(sources[m.role], staging / m.path)) for m in entries
    }
    policy = policy_section(choice, opts) | {"weight_error": errors}
    return Bundle(staging, entries, tokenizer_section(infos["target"][0]), policy)


def float_gguf(source: Path, work: Path, role: str) -> Path:
    """A GGUF file for source: itself if it is one, else the HF folder converted to f16."""
    if source.is_dir():
        from edgespec.export.hf_to_gguf import convert_hf_to_gguf

        return convert_hf_to_gguf(source, work / f"{role}.f16.gguf", outtype="f16")
    if not source.exists():
        raise ModelFileError(f"{role} source not found: {source}; check the path")
    return source  # LlamaCppRuntime checks the magic and refuses what is not GGUF


def read_vocab(path: Path) -> tuple[VocabInfo, dict[str, object]]:
    rt = LlamaCppRuntime(path, vocab_only=True)
    meta = {"arch": rt.metadata("general.architecture") or "unknown", "n_ctx": rt.n_ctx_train}
    return rt.vocab_info(), meta


def quantize_role(
    role: str,
    src: Path,
    staging: Path,
    choice: PrecisionChoice,
    threads: int | None,
    info: tuple[VocabInfo, dict[str, object]],
) -> ModelEntry:
    qtype = choice.target_quant if role == "target" else choice.draft_quant
    output_type = choice.output_tensor_type if role == "target" else None
    dst = staging / f"{role}.{qtype}.gguf"
    t0 = time.perf_counter()
    quantize_gguf(src, dst, qtype, output_tensor_type=output_type, threads=threads)
    log.info("%s: %s -> %s in %.1fs", role, src.name, dst.name, time.perf_counter() - t0)
    vocab, meta = info
    return ModelEntry(
        role,
        "gguf",
        dst.name,
        qtype,
        sha256_file(dst),
        dst.stat().st_size,
        vocab.n_vocab,
        vocab.token_text_hash,
        int(meta["n_ctx"]),  # type: ignore[call-overload]
        str(meta["arch"]),
    )


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


def tune(bundle: Bundle) -> dict[str, object]:
    from edgespec.calibrate import tune_bundle

    return tune_bundle(bundle)
