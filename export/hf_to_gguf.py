"""Hugging Face checkpoint folder (Llama, Mistral, Qwen2, Qwen3, Gemma 3, Phi-3) -> float GGUF.

The gguf package does the writing and the tensor-name mapping; this module only decides what
goes in: hyperparameters from config.json, weights and tokenizer as export/checkpoint.py reads
them (bf16 widened exactly), and the byte-level BPE tokenizer with its chat template.
llama.cpp's Llama architecture applies RoPE to interleaved pairs where HF rotates halves, so
q and k of Llama/Mistral are permuted on the way (Qwen2 uses the halves form, as HF does);
Phi-3's fused tensors stay fused, as llama.cpp's converter keeps them.
Each tensor is written as it is read, a block of rows at a time, so memory stays bounded by
one block whatever the model's size.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgespec.errors import ModelFileError
from edgespec.export.checkpoint import (
    Checkpoint,
    Rows,
    SafetensorsIndex,
    permute_for_interleaved_rope,
    read_hf_checkpoint,
    special_id,
)
from edgespec.export.rope import attention_factor, rotary_dim, scale_inv_freq, scaling_kind
from edgespec.plumbing.progress import progress

log = logging.getLogger(__name__)
BLOCK_BYTES = 64 << 20  # float32 rows read, cast and written at a time


@dataclass(frozen=True)
class ArchSpec:
    gguf_arch: str  # name in gguf.MODEL_ARCH_NAMES
    permute_qk: bool  # HF halves-RoPE -> llama.cpp interleaved RoPE
    pre_tokenizer: str  # llama.cpp's tokenizer.ggml.pre for byte-level BPE of this family
    norm_shift: float = 0.0  # added to every norm weight (Gemma's 1 + w, as llama.cpp keeps it)
    # what llama.cpp reads of this family beyond Llama's fields: (writer, config, head_dim)
    hparams: Callable[[Any, dict, int], None] | None = None


def check_gemma3(config: dict, head_dim: int) -> None:
    """llama.cpp's gemma3 keeps in code what a config may say otherwise: refused where it does."""
    layers = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
              for i in range(config["num_hidden_layers"])]  # fmt: skip
    wanted = {"layer_types": layers, "query_pre_attn_scalar": head_dim,
              "rope_local_base_freq": 10000.0}  # fmt: skip
    for key, value in wanted.items():
        if config.get(key, value) != value:
            raise ModelFileError(
                f"{key} is {config[key]!r}, where llama.cpp's gemma3 computes {value!r}; this "
                "Gemma 3 cannot be converted to GGUF (export it to ONNX instead)"
            )


def gemma3_hparams(writer, config: dict, head_dim: int) -> None:
    check_gemma3(config, head_dim)
    writer.add_sliding_window(config["sliding_window"])


def phi3_hparams(writer, config: dict, head_dim: int) -> None:
    """As llama.cpp's converter writes them: the window (0 for none) and longrope's original
    context."""
    writer.add_sliding_window(config.get("sliding_window") or 0)
    original = config.get("original_max_position_embeddings")
    writer.add_rope_scaling_orig_ctx_len(original or config.get("max_position_embeddings", 4096))


ARCHS = {  # the architectures export/checkpoint.py reads (HF_ARCHS)
    "LlamaForCausalLM": ArchSpec("llama", True, "llama-bpe"),
    "MistralForCausalLM": ArchSpec("llama", True, "llama-bpe"),
    "Qwen2ForCausalLM": ArchSpec("qwen2", False, "qwen2"),
    "Qwen3ForCausalLM": ArchSpec("qwen3", False, "qwen2"),
    "Gemma3ForCausalLM": ArchSpec("gemma3", False, "default", 1.0, gemma3_hparams),
    "Phi3ForCausalLM": ArchSpec("phi3", False, "default", hparams=phi3_hparams),
}


def convert_hf_to_gguf(hf_dir: Path, out_path: Path, *, outtype: str = "f16") -> Path:
    import gguf

    ckpt = read_hf_checkpoint(hf_dir)
    config = ckpt.config
    spec = ARCHS[config["architectures"][0]]
    arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == spec.gguf_arch)
    writer = gguf.GGUFWriter(str(out_path), spec.gguf_arch)
    write_hparams(writer, config, outtype)
    write_tokenizer(writer, ckpt, spec)
    names = gguf.TensorNameMap(arch, config["num_hidden_layers"])
    tensors: list[tuple[Rows, np.dtype]] = []  # (rows as written, dtype)
    stored = SafetensorsIndex(hf_dir)  # as stored: a fused tensor stays one
    for hf_name in stored:
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            if hf_name.endswith("rotary_emb.inv_freq"):
                continue  # recomputed by llama.cpp from rope_theta
            raise ModelFileError(f"{hf_dir}: tensor {hf_name} has no GGUF name; not supported")
        rows = stored.rows(hf_name)
        if spec.permute_qk and name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = config["num_attention_heads"]
            if name.endswith("attn_k.weight"):
                heads = config.get("num_key_value_heads", heads)
            rows = Rows.of(permute_for_interleaved_rope(rows.read(0, rows.shape[0]), heads))
        if spec.norm_shift and name.endswith("norm.weight"):
            rows = Rows.of(rows.read(0, rows.shape[0]) + np.float32(spec.norm_shift))
        dtype = np.dtype(np.float16 if outtype == "f16" and len(rows.shape) == 2 else np.float32)
        writer.add_tensor_info(name, rows.shape, dtype, dtype.itemsize * rows.nbytes // 4)
        tensors.append((rows, dtype))
    for name, rows in rope_tensors(writer, config):
        writer.add_tensor_info(name, rows.shape, np.dtype(np.float32), rows.nbytes)
        tensors.append((rows, np.dtype(np.float32)))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for rows, dtype in progress(tensors, f"gguf {out_path.name}", unit="tensor"):
        writer.write_tensor_data(StreamedTensor(rows, dtype))  # type: ignore[arg-type]
    writer.close()
    return out_path


def write_metadata_gguf(hf_dir: Path, out_path: Path) -> Path:
    """A GGUF of the checkpoint's hyperparameters and tokenizer and no tensors: what
    convert_eagle3 reads of a target (an ONNX export of a Hugging Face target needs no full
    GGUF of it: a 7B's f16 is 15 GB)."""
    import gguf

    ckpt = read_hf_checkpoint(hf_dir)
    spec = ARCHS[ckpt.config["architectures"][0]]
    writer = gguf.GGUFWriter(str(out_path), spec.gguf_arch)
    write_hparams(writer, ckpt.config, "f16")
    write_tokenizer(writer, ckpt, spec)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return out_path


class StreamedTensor:
    """What GGUFWriter.write_tensor_data uses of an array (nbytes, tofile), cast and written a
    block of rows at a time: 2-D weights in f16 when asked, norms and biases in float32, as
    llama.cpp expects."""

    def __init__(self, rows: Rows, dtype: np.dtype) -> None:
        self.rows, self.dtype = rows, dtype
        self.nbytes = dtype.itemsize * rows.nbytes // 4

    def tofile(self, f) -> None:
        for start, stop in self.rows.blocks(BLOCK_BYTES):
            self.rows.read(start, stop).astype(self.dtype).tofile(f)


def write_hparams(writer, config: dict, outtype: str) -> None:
    n_head = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head
    writer.add_context_length(config.get("max_position_embeddings", 4096))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(config.get("num_key_value_heads", n_head))
    writer.add_rope_dimension_count(rotary_dim(config, head_dim))
    writer.add_key_length(head_dim)  # Qwen3's heads are wider than hidden_size / heads
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    spec = ARCHS[config["architectures"][0]]
    if spec.hparams is not None:
        spec.hparams(writer, config, head_dim)
    writer.add_file_type(1 if outtype == "f16" else 0)


def rope_tensors(writer, config: dict) -> list[tuple[str, Rows]]:
    """The config's RoPE scaling as llama.cpp reads it: linear in the metadata, Llama 3's
    llama3 as the rope_freqs tensor (a divisor per frequency); another kind is refused."""
    import gguf

    scaling = config.get("rope_scaling") or {}
    kind = scaling_kind(scaling)
    if kind == "longrope":  # llama.cpp picks long or short by n_ctx against the original context
        writer.add_rope_scaling_attn_factors(attention_factor(config))
        return [(f"rope_factors_{w}.weight", Rows.of(np.array(scaling[f"{w}_factor"], np.float32)))
                for w in ("long", "short")]  # fmt: skip
    if kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
    if kind not in ("default", "linear", "llama3"):
        raise ModelFileError(
            f"rope_scaling type {kind!r} cannot be converted to GGUF by edgespec (default, "
            "linear, llama3, Phi-3's longrope can); use llama.cpp's convert_hf_to_gguf.py"
        )
    if kind != "llama3":
        return []
    n_head = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head
    theta = float(config.get("rope_theta", 10000.0))
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    factors = (inv_freq / scale_inv_freq(inv_freq, scaling)).astype(np.float32)
    return [("rope_freqs.weight", Rows.of(factors))]


def write_tokenizer(writer, ckpt: Checkpoint, spec: ArchSpec) -> None:
    tok = json.loads(ckpt.tokenizer_json)
    config = ckpt.config
    model = tok.get("model", {})
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        raise ModelFileError(
            f"{ckpt.source}/tokenizer.json: only byte-level BPE tokenizers are supported "
            "(GPT-2 style, as Qwen2 and Llama 3 use); SentencePiece-style BPE is not"
        )
    n_vocab = config.get("vocab_size") or len(model["vocab"])
    tokens = [f"[PAD{i}]" for i in range(n_vocab)]
    types = [5] * n_vocab  # unused, until named below
    for text, i in model["vocab"].items():
        tokens[i], types[i] = text, 1
    for added in tok.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        types[added["id"]] = 3 if added.get("special") else 4  # control / user-defined
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre_tokenizer_name(tok, spec))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    tok_config = ckpt.tokenizer_config
    for role, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id)):
        token_id = special_id(
            tok_config.get(f"{role}_token"), tokens, config.get(f"{role}_token_id")
        )
        if token_id is not None:
            add(token_id)
    writer.add_add_bos_token(bool(tok_config.get("add_bos_token", False)))
    if tok_config.get("chat_template"):
        writer.add_chat_template(tok_config["chat_template"])


def pre_tokenizer_name(tok: dict, spec: ArchSpec) -> str:
    """GPT-2's own regex (a bare ByteLevel pre-tokenizer) or the family's (a Split regex)."""
    pre = tok.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel" and pre.get("use_regex", True):
        return "gpt-2"
    return spec.pre_tokenizer
