"""A tiny random EAGLE-3 head as llama.cpp reads one (src/models/eagle3.cpp), written in the
test run for a tiny target of tests/tiny_gguf.py: general.architecture "eagle3", metadata
eagle3.target_layers (3 ids) and eagle3.target_hidden_size, tensors fc.weight, one decoder
layer (attn_norm on the token embedding, attn_norm_2 on the fused features, q/k/v over their
concatenation), output_norm and output; optionally d2t. No token_embd: the head borrows the
target's (llama_context_params.ctx_other)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.tiny_gguf import TinyConfig, vocabulary, write_tensors


def head_weights(
    n_embd_tgt: int, n_vocab: int, seed: int, *, n_embd: int = 64, n_ff: int = 128
) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in PyTorch (out, in) layout."""
    rng = np.random.default_rng(seed)
    n_head, n_head_kv, hd = 4, 2, n_embd // 4

    def w(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    ones = np.ones(n_embd, np.float32)
    return {
        "fc.weight": w(n_embd, 3 * n_embd_tgt),
        "blk.0.attn_norm.weight": ones,
        "blk.0.attn_norm_2.weight": ones,
        "blk.0.attn_q.weight": w(n_head * hd, 2 * n_embd),
        "blk.0.attn_k.weight": w(n_head_kv * hd, 2 * n_embd),
        "blk.0.attn_v.weight": w(n_head_kv * hd, 2 * n_embd),
        "blk.0.attn_output.weight": w(n_embd, n_head * hd),
        "blk.0.ffn_norm.weight": ones,
        "blk.0.ffn_gate.weight": w(n_ff, n_embd),
        "blk.0.ffn_up.weight": w(n_ff, n_embd),
        "blk.0.ffn_down.weight": w(n_embd, n_ff),
        "output_norm.weight": ones,
        "output.weight": w(n_vocab, n_embd, scale=6.0),
    }


def write_head(
    path: Path,
    target: TinyConfig,
    *,
    seed: int = 7,
    layers: tuple[int, ...] = (1, 2, 3),
    hidden: int | None = None,
    n_vocab: int | None = None,
    arch: str = "eagle3",
) -> Path:
    """hidden: eagle3.target_hidden_size (default the target's n_embd); n_vocab: a vocabulary
    of that many tokens (default the target's): both written wrong to test refusals."""
    import gguf

    tokens, types, merges = vocabulary()
    if n_vocab is not None:
        tokens, types = tokens[:n_vocab], types[:n_vocab]
    hidden = target.n_embd if hidden is None else hidden
    tensors = head_weights(hidden, len(tokens), seed)
    n_embd, n_ff = tensors["fc.weight"].shape[0], tensors["blk.0.ffn_up.weight"].shape[0]
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("edgespec-tiny-eagle3")
    writer.add_context_length(target.n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(1)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_dimension_count(n_embd // 4)
    writer.add_rope_freq_base(target.rope_theta)
    writer.add_layer_norm_rms_eps(target.rms_eps)
    writer.add_file_type(0)
    writer.add_array(f"{arch}.target_layers", list(layers))
    writer.add_uint32(f"{arch}.target_hidden_size", hidden)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m for m in merges if m.replace(" ", "") in tokens])
    writer.add_eos_token_id(tokens.index("<|im_end|>") if "<|im_end|>" in tokens else 0)
    return write_tensors(writer, tensors, path)


def rope_adjacent(x: np.ndarray, theta: float) -> np.ndarray:
    """llama.cpp's normal RoPE (pairs of adjacent dimensions): x [n_head, n, head_dim]."""
    n, hd = x.shape[1], x.shape[2]
    angles = np.arange(n)[:, None] * (theta ** (-np.arange(0, hd, 2) / hd))[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    return out


def reference_logits(
    w: dict[str, np.ndarray], embd: np.ndarray, tokens: list[int], g: np.ndarray, cfg: TinyConfig
) -> np.ndarray:
    """The EAGLE-3 decoder of src/models/eagle3.cpp in numpy, from position 0: pairs
    (tokens[i], g[i]); embd the target's token embeddings. [n, n_vocab] float64 logits."""
    from tests.numpy_reference import rms_norm

    n, eps = len(tokens), cfg.rms_eps
    x = rms_norm(embd[tokens].astype(np.float64), w["blk.0.attn_norm.weight"], eps)
    cat = np.concatenate([x, rms_norm(g, w["blk.0.attn_norm_2.weight"], eps)], axis=1)
    n_head, n_kv = 4, 2

    def proj(name: str, heads: int) -> np.ndarray:
        return (cat @ w[f"blk.0.attn_{name}.weight"].T).reshape(n, heads, -1).transpose(1, 0, 2)

    q, k = (
        rope_adjacent(proj("q", n_head), cfg.rope_theta),
        rope_adjacent(proj("k", n_kv), cfg.rope_theta),
    )
    k, v = np.repeat(k, n_head // n_kv, 0), np.repeat(proj("v", n_kv), n_head // n_kv, 0)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]) + np.triu(np.full((n, n), -np.inf), 1)
    att = np.exp(scores - scores.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    ffn_inp = (att @ v).transpose(1, 0, 2).reshape(n, -1) @ w["blk.0.attn_output.weight"].T + g
    h = rms_norm(ffn_inp, w["blk.0.ffn_norm.weight"], eps)
    gate, up = h @ w["blk.0.ffn_gate.weight"].T, h @ w["blk.0.ffn_up.weight"].T
    out = ffn_inp + (gate / (1 + np.exp(-gate)) * up) @ w["blk.0.ffn_down.weight"].T
    return rms_norm(out, w["output_norm.weight"], eps) @ w["output.weight"].T
