"""The GGUF builder: HF folders or GGUF files in, the target and the draft as GGUF files out,
and a trained draft head (EAGLE-3) beside them where one is given.

Sources are converted to a float GGUF first (HF folders through the gguf package's writer,
see hf_to_gguf.py); llama.cpp's own quantizer then writes the target and the draft at the
precisions the policy chose. A head is copied as it is, once the source target has opened
it (pair.open_head: hidden size, extract layers, vocabulary). The orchestrator
(export/orchestrator.py) stages and writes the bundle around it.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from edgespec.backends import RuntimeOptions, open_runtime
from edgespec.bundle import ModelEntry, sha256_file
from edgespec.errors import ModelFileError
from edgespec.export.eagle3_gguf import vendored_spelling
from edgespec.export.options import BuiltModels, ExportOptions
from edgespec.pair import check_head_path
from edgespec.quant.gguf_quant import quantize_gguf, weight_errors
from edgespec.quant.policy import PrecisionChoice, resolve_precision
from edgespec.quant.reference import error_summary
from edgespec.runtime import VocabInfo, check_compatible
from edgespec.runtimes.llamacpp import LlamaCppRuntime

log = logging.getLogger(__name__)


def build_gguf(opts: ExportOptions, work_dir: Path, staging: Path) -> BuiltModels:
    if opts.head is not None and not opts.head.is_dir():  # a GGUF head: checked before any
        check_head_path(opts.head)  # conversion (a folder is converted for the target below)
    sources = {role: float_gguf(path, work_dir, role) for role, path in opts.sources().items()}
    infos = {role: read_source(path) for role, path in sources.items()}
    vocab = infos["target"].vocab
    if "draft" in infos:  # refuse before spending minutes on quantization
        check_compatible(vocab, infos["draft"].vocab, str(opts.target), str(opts.draft))
    head = opts.head
    if head is not None:
        if head.is_dir():
            head = converted_head(head, sources["target"], work_dir)
        else:
            head = vendored_spelling(head, work_dir)
        head = fitted_head(head, sources["target"])
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
    if head is not None:
        entries.append(copy_head(head, staging))
    return BuiltModels(tuple(entries), vocab, choice, {"weight_error": errors})


def converted_head(folder: Path, target_gguf: Path, work: Path) -> Path:
    """A Hugging Face EAGLE-3 checkpoint folder as a GGUF head for the target
    (export/eagle3_convert.py, refused there if it does not fit)."""
    from edgespec.export.eagle3_convert import convert_eagle3

    return convert_eagle3(folder, target_gguf, work / "head.f16.gguf")


def fitted_head(head: Path, target: Path) -> Path:
    """The head, once the target has opened it (refused there if it does not fit:
    HeadMismatchError; or if this llama.cpp cannot run heads: HeadUnsupportedError): before
    the target is quantized, as the draft's vocabulary is checked."""
    from edgespec.pair import open_head

    rt = open_runtime(target, RuntimeOptions(n_ctx=256, n_threads=1))
    open_head(rt, target, head).close()
    return head


def copy_head(source: Path, staging: Path) -> ModelEntry:
    """The head copied into the bundle as it is, described for the manifest."""
    quant = file_type(source)
    dst = staging / f"head.{quant}.gguf"
    shutil.copyfile(source, dst)
    log.info("head: %s copied as %s", source.name, dst.name)
    return model_entry("head", dst, quant, read_source(dst))


def file_type(path: Path) -> str:
    """A GGUF file's general.file_type as llama.cpp names it (f16, q8_0, ...)."""
    import gguf

    from edgespec.runtimes.gguf_meta import read_metadata

    value = read_metadata(path).get("general.file_type")
    try:
        name = gguf.LlamaFileType(int(value)).name if value is not None else "unknown"
    except ValueError:
        return f"type{value}"
    return name.removeprefix("MOSTLY_").removeprefix("ALL_").lower()


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
