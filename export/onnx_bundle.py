"""`edgespec export --format onnx`: HF folders or GGUF files in, a bundle of ONNX model folders
out (graph, weights and tokenizer per role; export/onnx_export.py writes each)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from edgespec.export.checkpoint import Checkpoint, read_checkpoint
from edgespec.export.gguf_export import ExportOptions, policy_section, tokenizer_section
from edgespec.export.onnx_export import export_onnx
from edgespec.quant.policy import resolve_onnx_precision
from edgespec.runtimes.base import VocabInfo, check_compatible

from edgespec.bundle import Bundle, ModelEntry, sha256_path, size_of
from edgespec.errors import EdgespecError

log = logging.getLogger(__name__)


def build_onnx_bundle(opts: ExportOptions, staging: Path) -> Bundle:
    if opts.output_tensor_type:
        raise EdgespecError("--output-tensor-type applies to --format gguf only")
    sources = {"target": read_checkpoint(opts.target)}
    if opts.draft is not None:
        sources["draft"] = read_checkpoint(opts.draft)
    vocabs = {role: checkpoint_vocab(ckpt) for role, ckpt in sources.items()}
    if "draft" in vocabs:  # refuse before spending minutes on quantization
        check_compatible(vocabs["target"], vocabs["draft"], str(opts.target), str(opts.draft))
    choice = resolve_onnx_precision(opts.device, opts.target_quant, opts.draft_quant, opts.force)
    compute = "fp32" if opts.device == "cpu" else "fp16"
    entries, errors = [], {}
    for role, ckpt in sources.items():
        quant = choice.target_quant if role == "target" else choice.draft_quant
        if compute == "fp16" and quant == "fp32":
            quant = "fp16"  # the CUDA EP's attention runs in half: fp32 weights cannot feed it
        folder = staging / f"{role}.{quant}"
        t0 = time.perf_counter()
        export_onnx(ckpt, folder, quant=quant, compute=compute, block_size=opts.int4_block)
        errors[role] = json.loads((folder / "model.json").read_text()).get("weight_error")
        log.info("%s: %s -> %s in %.1fs", role, ckpt.source, folder.name, time.perf_counter() - t0)
        entries.append(model_entry(role, folder, quant, ckpt, vocabs[role]))
    policy = policy_section(choice, opts) | {
        "compute": compute,
        "int4_block": opts.int4_block,
        "notes": notes(sources),
        "weight_error": errors,
    }
    return Bundle(staging, tuple(entries), tokenizer_section(vocabs["target"]), policy)


def checkpoint_vocab(ckpt: Checkpoint) -> VocabInfo:
    from edgespec.export.onnx_export import model_info
    from edgespec.runtimes.onnxrt import tokenizer_vocab_info, vocab_type
    from tokenizers import Tokenizer

    info = model_info(ckpt, "fp32", "fp32", 32, 0)
    return tokenizer_vocab_info(
        Tokenizer.from_str(ckpt.tokenizer_json),
        vocab_type(json.loads(ckpt.tokenizer_json)["model"]),
        info.n_vocab,
        info.bos_id,
        info.eos_id,
        ckpt.generation_config,
    )


def model_entry(
    role: str, folder: Path, quant: str, ckpt: Checkpoint, vocab: VocabInfo
) -> ModelEntry:
    return ModelEntry(
        role,
        "onnx",
        folder.name,
        quant,
        sha256_path(folder),
        size_of(folder),
        vocab.n_vocab,
        vocab.token_text_hash,
        int(ckpt.config.get("max_position_embeddings", 4096)),
        str(ckpt.config["architectures"][0]),
    )


def notes(sources: dict[str, Checkpoint]) -> list[str]:
    return [f"{role}: {note}" for role, ckpt in sources.items() for note in ckpt.notes]
