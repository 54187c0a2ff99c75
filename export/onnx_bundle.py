"""The ONNX builder: HF folders or GGUF files in, one ONNX model folder per role out (graph,
weights and tokenizer; export/onnx_export.py writes each). The orchestrator
(export/orchestrator.py) stages and writes the bundle around it."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from edgespec.bundle import ModelEntry, sha256_path, size_of
from edgespec.errors import EdgespecError
from edgespec.export.checkpoint import Checkpoint, read_checkpoint
from edgespec.export.eagle3_convert import convert_eagle3
from edgespec.export.eagle3_gguf import vendored_spelling
from edgespec.export.eagle3_onnx import export_head_onnx, head_metadata
from edgespec.export.hf_to_gguf import write_metadata_gguf
from edgespec.export.onnx_export import head_ranges, model_info, write_onnx_model
from edgespec.export.options import BuiltModels, ExportOptions
from edgespec.pair import check_head_path
from edgespec.quant.policy import resolve_onnx_precision
from edgespec.runtime import VocabInfo, check_compatible
from edgespec.runtimes.shared import logit_count

log = logging.getLogger(__name__)

# Token ids a draft's output layer keeps by default (`--draft-vocab`): a cheaper draft token
# while the demo target's outputs stay 99.4-99.7% ids below it (docs/decisions.md)
DRAFT_VOCAB = 98_304


def build_onnx(opts: ExportOptions, work_dir: Path, staging: Path) -> BuiltModels:
    if opts.output_tensor_type:
        raise EdgespecError("--output-tensor-type applies to --format gguf only")
    sources = {role: read_checkpoint(path) for role, path in opts.sources().items()}
    vocabs = {role: checkpoint_vocab(ckpt) for role, ckpt in sources.items()}
    if "draft" in vocabs:  # refuse before spending minutes on quantization
        check_compatible(vocabs["target"], vocabs["draft"], str(opts.target), str(opts.draft))
    choice = resolve_onnx_precision(opts.device, opts.target_quant, opts.draft_quant, opts.force)
    compute = "fp32" if opts.device == "cpu" else "fp16"
    head = head_gguf(opts, work_dir)
    head_layers = head_metadata(head)[1]["layers"] if head is not None else None
    entries, errors = [], {}
    kept = None  # token ids the draft's output layer keeps
    for role, ckpt in sources.items():
        quant = stored_quant(choice.target_quant if role == "target" else choice.draft_quant,
                             compute)  # fmt: skip
        folder = staging / f"{role}.{quant}"
        t0 = time.perf_counter()
        ranges = draft_head(ckpt, vocabs[role], opts.draft_vocab) if role == "draft" else None
        hidden = head_layers if role == "target" else None  # what the head reads
        info = write_onnx_model(ckpt, folder, quant, compute, opts.int4_block,
                                logit_ranges=ranges, hidden_layers=hidden)  # fmt: skip
        if ranges is not None:
            kept = logit_count(ranges)
        errors[role] = info.weight_error
        log.info("%s: %s -> %s in %.1fs", role, ckpt.source, folder.name, time.perf_counter() - t0)
        entries.append(model_entry(role, folder, quant, ckpt, vocabs[role]))
    if head is not None:  # drafted gently: the draft's precision
        quant = stored_quant(choice.draft_quant, compute)
        folder = staging / f"head.{quant}"
        export_head_onnx(head, sources["target"], folder, quant=quant, compute=compute,
                         block_size=opts.int4_block)  # fmt: skip
        entries.append(model_entry("head", folder, quant, sources["target"], vocabs["target"]))
    policy = {
        "compute": compute,
        "int4_block": opts.int4_block,
        "draft_vocab": kept,
        "notes": notes(sources),
        "weight_error": errors,
    }
    return BuiltModels(tuple(entries), vocabs["target"], choice, policy)


def stored_quant(quant: str, compute: str) -> str:
    """A role's weight precision as written: the CUDA EP's attention runs in half, so fp32
    weights cannot feed an fp16-compute graph and are stored fp16."""
    return "fp16" if compute == "fp16" and quant == "fp32" else quant


def head_gguf(opts: ExportOptions, work_dir: Path) -> Path | None:
    """--head as a GGUF file: as given, or a Hugging Face EAGLE-3 folder converted against
    the target's GGUF (of a target given as an HF folder, its metadata alone)."""
    if opts.head is None:
        return None
    if not opts.head.is_dir():
        check_head_path(opts.head)
        return vendored_spelling(opts.head, work_dir)
    target = opts.target
    if target.is_dir():  # convert_eagle3 reads a target's metadata and tokenizer alone
        target = write_metadata_gguf(target, work_dir / "target.metadata.gguf")
    return convert_eagle3(opts.head, target, work_dir / "head.f16.gguf")


def draft_head(
    ckpt: Checkpoint, vocab: VocabInfo, keep: int | None
) -> list[tuple[int, int]] | None:
    """The token-id ranges the draft's output layer keeps (export/onnx_export.head_ranges):
    `keep` ids (None: DRAFT_VOCAB) and every added and end-of-generation token; None keeps
    the whole layer (keep 0, or a vocabulary no larger)."""
    keep = DRAFT_VOCAB if keep is None else keep
    if keep == 0 or keep >= vocab.n_vocab:
        return None
    added = [t["id"] for t in json.loads(ckpt.tokenizer_json).get("added_tokens", [])]
    specials = [*added, *vocab.eog_ids, vocab.bos_id, vocab.eos_id]
    return head_ranges(vocab.n_vocab, keep, [i for i in specials if isinstance(i, int)])


def checkpoint_vocab(ckpt: Checkpoint) -> VocabInfo:
    from tokenizers import Tokenizer

    from edgespec.runtimes.model_folder import tokenizer_vocab_info, vocab_type

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
