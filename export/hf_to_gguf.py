"""Hugging Face checkpoint folder (Llama, Mistral, Qwen2) -> float GGUF.

The gguf package does the writing and the tensor-name mapping; this module only decides what
goes in: hyperparameters from config.json, weights from *.safetensors (read with numpy, bf16
included), and the byte-level BPE tokenizer from tokenizer.json with its chat template.
llama.cpp's Llama architecture applies RoPE to interleaved pairs where HF rotates halves, so
q and k of Llama/Mistral are permuted on the way (Qwen2 uses the halves form, as HF does).
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgespec.errors import ModelFileError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArchSpec:
    gguf_arch: str  # name in gguf.MODEL_ARCH_NAMES
    permute_qk: bool  # HF halves-RoPE -> llama.cpp interleaved RoPE
    pre_tokenizer: str  # llama.cpp's tokenizer.ggml.pre for byte-level BPE of this family


ARCHS = {
    "LlamaForCausalLM": ArchSpec("llama", True, "llama-bpe"),
    "MistralForCausalLM": ArchSpec("llama", True, "llama-bpe"),
    "Qwen2ForCausalLM": ArchSpec("qwen2", False, "qwen2"),
}
REQUIRED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json")
SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


def convert_hf_to_gguf(hf_dir: Path, out_path: Path, *, outtype: str = "f16") -> Path:
    import gguf

    config = read_checkpoint_config(hf_dir)
    spec = ARCHS[config["architectures"][0]]
    arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == spec.gguf_arch)
    writer = gguf.GGUFWriter(str(out_path), spec.gguf_arch)
    write_hparams(writer, config, outtype)
    write_tokenizer(writer, hf_dir, config, spec)
    names = gguf.TensorNameMap(arch, config["num_hidden_layers"])
    for hf_name, array in read_safetensors_dir(hf_dir):
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            if hf_name.endswith("rotary_emb.inv_freq"):
                continue  # recomputed by llama.cpp from rope_theta
            raise ModelFileError(f"{hf_dir}: tensor {hf_name} has no GGUF name; not supported")
        if spec.permute_qk and name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = config["num_attention_heads"]
            if name.endswith("attn_k.weight"):
                heads = config.get("num_key_value_heads", heads)
            array = permute_for_interleaved_rope(array, heads)
        writer.add_tensor(name, cast(array, outtype))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_path


def read_checkpoint_config(hf_dir: Path) -> dict:
    if not hf_dir.is_dir():
        raise ModelFileError(f"{hf_dir} is not a folder; give a Hugging Face checkpoint folder")
    missing = [f for f in REQUIRED_FILES if not (hf_dir / f).is_file()]
    if not any(hf_dir.glob("*.safetensors")):
        missing.append("*.safetensors")
    if missing:
        raise ModelFileError(f"{hf_dir} is missing {', '.join(missing)}")
    config = json.loads((hf_dir / "config.json").read_text())
    archs = config.get("architectures") or ["(none)"]
    if archs[0] not in ARCHS:
        raise ModelFileError(
            f"{hf_dir}: architecture {archs[0]} is not supported; supported: {', '.join(ARCHS)}"
        )
    return config


def write_hparams(writer, config: dict, outtype: str) -> None:
    n_head = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // n_head
    writer.add_context_length(config.get("max_position_embeddings", 4096))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(config.get("num_key_value_heads", n_head))
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(config.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_file_type(1 if outtype == "f16" else 0)


def write_tokenizer(writer, hf_dir: Path, config: dict, spec: ArchSpec) -> None:
    tok = json.loads((hf_dir / "tokenizer.json").read_text())
    model = tok.get("model", {})
    if model.get("type") != "BPE" or model.get("byte_fallback"):
        raise ModelFileError(
            f"{hf_dir}/tokenizer.json: only byte-level BPE tokenizers are supported "
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
    tok_config = json.loads((hf_dir / "tokenizer_config.json").read_text())
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


def special_id(token: object, tokens: list[str], fallback: object) -> int | None:
    if isinstance(token, dict):
        token = token.get("content")
    if isinstance(token, str) and token in tokens:
        return tokens.index(token)
    return fallback if isinstance(fallback, int) else None


def permute_for_interleaved_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """[n_head * head_dim, in]: within each head, rows (first half, second half) become pairs."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_from_interleaved_rope(w: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of permute_for_interleaved_rope: llama.cpp's pairs back to HF's halves."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def cast(array: np.ndarray, outtype: str) -> np.ndarray:
    """2-D weights in outtype; norms and biases stay float32, as llama.cpp expects."""
    if outtype == "f16" and array.ndim == 2:
        return array.astype(np.float16)
    return array.astype(np.float32)


def read_safetensors_dir(hf_dir: Path) -> Iterator[tuple[str, np.ndarray]]:
    index = SafetensorsIndex(hf_dir)
    for name in index:
        yield name, index[name]


class LazyTensors(Mapping[str, np.ndarray]):
    """Float32 tensors by name, each read only when asked for (a checkpoint is never all in
    memory at once): `entries` says where each one is, `__getitem__` reads it."""

    entries: dict

    def __contains__(self, name: object) -> bool:  # without reading the tensor
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)


class SafetensorsIndex(LazyTensors):
    """The tensors of a folder's *.safetensors files (bf16 widened exactly)."""

    def __init__(self, hf_dir: Path) -> None:
        self.entries: dict[str, tuple[Path, int, dict]] = {}
        for path in sorted(hf_dir.glob("*.safetensors")):
            with path.open("rb") as f:
                (header_len,) = struct.unpack("<Q", f.read(8))
                header = json.loads(f.read(header_len))
            for name, info in header.items():
                if name != "__metadata__":
                    self.entries[name] = (path, 8 + header_len, info)

    def __getitem__(self, name: str) -> np.ndarray:
        path, offset, info = self.entries[name]
        if info["dtype"] not in SAFETENSORS_DTYPES:
            raise ModelFileError(f"{path}: tensor {name} has dtype {info['dtype']}; not supported")
        start, end = info["data_offsets"]
        if end == start:
            return np.zeros(info["shape"], np.float32)
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=offset + start, shape=end - start)
        raw = np.frombuffer(data, dtype=SAFETENSORS_DTYPES[info["dtype"]])
        if info["dtype"] == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.reshape(info["shape"]).astype(np.float32)
