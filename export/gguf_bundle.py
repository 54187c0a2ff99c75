"""The GGUF builder: HF folders or GGUF files in, the target and the draft as GGUF files out.

Sources are converted to a float GGUF first (HF folders through the gguf package's writer,
see hf_to_gguf.py); llama.cpp's own quantizer then writes the target and the draft at the
precisions the policy chose. The orchestrator (export/orchestrator.py) stages and writes the
bundle around it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from edgespec.bundle import ModelEntry, sha256_file
from edgespec.errors import ModelFileError
from edgespec.export.options import BuiltModels, ExportOptions
from edgespec.quant.gguf_quant import quantize_gguf, weight_errors
from edgespec.quant.policy import PrecisionChoice, resolve_precision
from edgespec.quant.reference import error_summary
from edgespec.runtime import VocabInfo, check_compatible
from edgespec.runtimes.llamacpp import LlamaCppRuntime

log = logging.getLogger(__name__)


def build_gguf(opts: ExportOptions, work_dir: Path, staging: Path) -> BuiltModels:
    sources = {role: float_gguf(path, work_dir, role) for role, path in opts.sources().items()}
    infos = {role: read_source(path) for role, path in sources.items()}
    vocab = infos["target"].vocab
    if "draft" in infos:  # refuse before spending minutes on quantization
        check_compatible(vocab, infos["draft"].vocab, str(opts.target), str(opts.draft))
    choice = resolve_precision(
        opts.device,
        vocab.n_vocab,
        opts.target_quant,
        opts.draft_quant,
        opts.output_tensor_type,
        opts.force,
    )
    log.info("precision: %s / %s (%s)", choice.target_quant, choice.draft_quant, choice.reason)
    entries, errors = [], {}
    for role, src in sources.items():
        dst = quantize_role(role, src, staging, choice, opts.threads)
        entries.append(model_entry(role, dst, role_quant(role, choice), infos[role]))
        errors[role] = error_summary(weight_errors(src, dst))
    return BuiltModels(tuple(entries), vocab, choice, {"weight_error": errors})


@dataclass(frozen=True)
class SourceInfo:
    vocab: VocabInfo
    n_ctx: int  # trained context length
    arch: str


def read_source(path: Path) -> SourceInfo:
    rt = LlamaCppRuntime(path, vocab_only=True)
    arch = rt.metadata("general.architecture") or "unknown"
    return SourceInfo(rt.vocab_info(), rt.n_ctx_train, str(arch))


def float_gguf(source: Path, work: Path, role: str) -> Path:
    """A GGUF file for source: itself if it is one, else the HF folder converted to f16."""
    if source.is_dir():
        from edgespec.export.hf_to_gguf import convert_hf_to_gguf

        return convert_hf_to_gguf(source, work / f"{role}.f16.gguf", outtype="f16")
    if not source.exists():
        raise ModelFileError(f"{role} source not found: {source}; check the path")
    return source  # LlamaCppRuntime checks the magic and refuses what is not GGUF


def quantize_role(
    role: str, src: Path, staging: Path, choice: PrecisionChoice, threads: int | None
) -> Path:
    """The role's file in the staging folder, written by llama.cpp's quantizer."""
    qtype = role_quant(role, choice)
    output_type = choice.output_tensor_type if role == "target" else None
    dst = staging / f"{role}.{qtype}.gguf"
    log.info("%s: quantizing %s to %s", role, src.name, qtype)
    t0 = time.perf_counter()
    quantize_gguf(src, dst, qtype, output_tensor_type=output_type, threads=threads)
    log.info("%s: %s -> %s in %.1fs", role, src.name, dst.name, time.perf_counter() - t0)
    return dst


def role_quant(role: str, choice: PrecisionChoice) -> str:
    return choice.target_quant if role == "target" else choice.draft_quant


def model_entry(role: str, dst: Path, quant: str, info: SourceInfo) -> ModelEntry:
    return ModelEntry(
        role,
        "gguf",
        dst.name,
        quant,
        sha256_file(dst),
        dst.stat().st_size,
        info.vocab.n_vocab,
        info.vocab.token_text_hash,
        info.n_ctx,
        info.arch,
    )
