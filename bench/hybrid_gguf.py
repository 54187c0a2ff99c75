"""Qwen3.5-architecture ("qwen35") GGUFs with random weights at any shape: gated-delta-net
layers (recurrent state) with a full-attention layer every fourth, and MTP (NextN) layers, in
the tensor layout the vendored llama.cpp loads (src/models/qwen35.cpp). The tests' tiny
hybrid target (tests/tiny_hybrid.py) and the shape-like Qwen3.5-2B whose MTP layer
bench/head_cost.py times against a target token are both written here.

    python bench/hybrid_gguf.py --shape qwen3.5-2b --out q35.gguf [--quant q4_k_m]

The 2B's published facts used: 24 layers, hidden size 2048 (llama.cpp's size table), the
248,320-row vocabulary, tied embeddings, one MTP layer, a full-attention layer every fourth;
the other widths are assumed (below). The vocabulary is bytes and ChatML's specials, padded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Qwen35Shape:
    n_embd: int
    n_layer: int  # the trunk's
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    key_heads: int  # the delta nets' (ssm.group_count)
    value_heads: int  # (ssm.time_step_rank)
    state_dim: int  # each delta-net head's width (ssm.state_size)
    n_vocab: int = 0  # rows of the embedding (0: the vocabulary's)
    mtp_layers: int = 1
    tied: bool = False  # no output.weight: the embedding is the output layer
    d_conv: int = 4
    full_attention_interval: int = 4
    n_ctx: int = 4096

    def is_attention(self, i: int) -> bool:
        return i >= self.n_layer or (i + 1) % self.full_attention_interval == 0


SHAPES = {
    "tiny": Qwen35Shape(64, 4, 128, 4, 2, 16, 2, 4, 16, n_ctx=512),
    # assumed: the MLP's 6144, 8 heads of 256 (2 KV), 16 delta-net key and value heads of 128
    "qwen3.5-2b": Qwen35Shape(
        2048, 24, 6144, 8, 2, 256, 16, 16, 128, n_vocab=248_320, tied=True
    ),  # fmt: skip
}


def tensors(shape: Qwen35Shape, n_vocab: int, seed: int) -> Iterator[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array in PyTorch (out, in) layout), unit-variance activations and a
    peaked output layer."""
    rng = np.random.default_rng(seed)
    d, hd = shape.n_embd, shape.head_dim
    key_dim, value_dim = shape.key_heads * shape.state_dim, shape.value_heads * shape.state_dim

    def w(*dims: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(dims, np.float32) * (scale / np.sqrt(dims[-1]))).astype(
            np.float32
        )

    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float32)

    yield "token_embd.weight", w(n_vocab, d, scale=np.sqrt(d))
    yield "output_norm.weight", ones(d)
    if not shape.tied:
        yield "output.weight", w(n_vocab, d, scale=6.0)
    for i in range(shape.n_layer + shape.mtp_layers):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", ones(d)
        yield p + "post_attention_norm.weight", ones(d)
        yield p + "ffn_gate.weight", w(shape.n_ff, d)
        yield p + "ffn_up.weight", w(shape.n_ff, d)
        yield p + "ffn_down.weight", w(d, shape.n_ff)
        if shape.is_attention(i):
            yield p + "attn_q.weight", w(2 * shape.n_head * hd, d)  # the query and its gate
            yield p + "attn_k.weight", w(shape.n_head_kv * hd, d)
            yield p + "attn_v.weight", w(shape.n_head_kv * hd, d)
            yield p + "attn_output.weight", w(d, shape.n_head * hd)
            yield p + "attn_q_norm.weight", ones(hd)
            yield p + "attn_k_norm.weight", ones(hd)
        else:
            yield p + "attn_qkv.weight", w(2 * key_dim + value_dim, d)
            yield p + "attn_gate.weight", w(value_dim, d)
            yield p + "ssm_conv1d.weight", w(2 * key_dim + value_dim, shape.d_conv)
            yield p + "ssm_dt.bias", np.zeros(shape.value_heads, np.float32)
            yield p + "ssm_a", -ones(shape.value_heads)
            yield p + "ssm_beta.weight", w(shape.value_heads, d)
            yield p + "ssm_alpha.weight", w(shape.value_heads, d)
            yield p + "ssm_norm.weight", ones(shape.state_dim)
            yield p + "ssm_out.weight", w(d, value_dim)
        if i >= shape.n_layer:
            yield p + "nextn.eh_proj.weight", w(d, 2 * d)
            yield p + "nextn.enorm.weight", ones(d)
            yield p + "nextn.hnorm.weight", ones(d)


def byte_vocabulary() -> tuple[list[str], list[int], list[str]]:
    """Token texts, types, merges: bytes, one merge (llama.cpp refuses a BPE vocabulary
    without merges) and the specials (llama_load_probe's, and <|im_start|> for ChatML)."""
    from edgespec.runtimes.llama_load_probe import SPECIALS, byte_tokens

    tokens, specials = [*byte_tokens(), "Ġt"], [*SPECIALS, "<|im_start|>"]
    return tokens + specials, [1] * len(tokens) + [3] * len(specials), ["Ġ t"]


def write_qwen35(
    path: Path,
    shape: Qwen35Shape,
    *,
    vocabulary: tuple[list[str], list[int], list[str]] | None = None,
    seed: int = 0,
    dtype: type = np.float32,
) -> Path:
    """The GGUF at path; vocabulary (token texts, types, merges; default byte_vocabulary) is
    padded with unused rows to shape.n_vocab; matrices in dtype (norms and the convolutions
    float32, as llama.cpp's converter writes them)."""
    import gguf

    from edgespec.runtimes.llama_load_probe import CHATML, add_byte_bpe_tokenizer

    tokens, types, merges = vocabulary or byte_vocabulary()
    n_vocab = max(shape.n_vocab, len(tokens))
    types = types + [5] * (n_vocab - len(tokens))
    tokens = tokens + [f"[PAD{i}]" for i in range(len(tokens), n_vocab)]
    arch = "qwen35"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"edgespec-random-qwen35-{shape.n_embd}x{shape.n_layer}")
    writer.add_context_length(shape.n_ctx)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer + shape.mtp_layers)
    writer.add_uint32(f"{arch}.nextn_predict_layers", shape.mtp_layers)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    n_rot = shape.head_dim // 4  # Qwen3.5 rotates a quarter of each head
    writer.add_rope_dimension_count(n_rot)
    third = n_rot // 6  # text alone: every section has the same positions
    writer.add_array(f"{arch}.rope.dimension_sections", [n_rot // 2 - 2 * third, third, third, 0])
    writer.add_rope_freq_base(10_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint32(f"{arch}.ssm.conv_kernel", shape.d_conv)
    writer.add_uint32(f"{arch}.ssm.inner_size", shape.value_heads * shape.state_dim)
    writer.add_uint32(f"{arch}.ssm.state_size", shape.state_dim)
    writer.add_uint32(f"{arch}.ssm.time_step_rank", shape.value_heads)
    writer.add_uint32(f"{arch}.ssm.group_count", shape.key_heads)
    writer.add_uint32(f"{arch}.full_attention_interval", shape.full_attention_interval)
    writer.add_file_type(0 if dtype == np.float32 else 1)
    add_byte_bpe_tokenizer(writer, tokens, types, merges, add_bos=False, chat_template=CHATML)
    for name, array in tensors(shape, n_vocab, seed):
        matrix = array.ndim == 2 and "ssm_conv1d" not in name  # ggml's ssm_conv reads float32
        writer.add_tensor(name, array.astype(dtype) if matrix else array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quant", help="llama.cpp's quantizer then writes this type (q4_k_m, ...)")
    args = ap.parse_args()
    if not args.quant:
        write_qwen35(args.out, SHAPES[args.shape], dtype=np.float16)
        return
    from edgespec.quant.gguf_quant import quantize_gguf

    f16 = args.out.with_suffix(".f16.gguf")
    write_qwen35(f16, SHAPES[args.shape], dtype=np.float16)
    quantize_gguf(f16, args.out, args.quant)
    f16.unlink()


if __name__ == "__main__":
    sys.exit(main())
