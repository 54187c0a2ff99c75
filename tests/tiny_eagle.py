"""A tiny random EAGLE-3 head as llama.cpp reads one, written in the test run for a tiny target
of tests/tiny_gguf.py, in the layout export/eagle3_gguf.py owns (fc, one decoder layer,
output_norm and output; no token_embd: the head borrows the target's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgespec.export.eagle3_gguf import ARCH, HeadShape, tensor_plan, write_hparams
from tests.tiny_gguf import TinyConfig, random_weights, vocabulary, write_gguf, write_tensors


def head_shape(
    n_embd_tgt: int,
    n_vocab: int,
    *,
    layers: tuple[int, int, int] = (1, 2, 3),
    n_embd: int = 64,
    n_ff: int = 128,
) -> HeadShape:
    return HeadShape(n_embd, n_embd_tgt, 4, 2, n_ff, n_vocab, layers)


def head_weights(
    n_embd_tgt: int, n_vocab: int, seed: int, *, n_embd: int = 64, n_ff: int = 128
) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in PyTorch (out, in) layout."""
    rng = np.random.default_rng(seed)
    plan = tensor_plan(head_shape(n_embd_tgt, n_vocab, n_embd=n_embd, n_ff=n_ff))
    return {
        name: np.ones(dims, np.float32)
        if std == 0.0
        else (rng.standard_normal(dims) * std).astype(np.float32)
        for name, dims, std in plan
    }


# the tiny target heads are tested on: 4 layers, so a head's three extract layers are apart
TARGET = TinyConfig(n_layer=4)


def write_target_and_head(folder: Path) -> tuple[Path, Path]:
    """The tiny random target (seed 0) and the head written for it, as target.gguf and
    head.gguf in folder."""
    n_vocab = len(vocabulary()[0])
    target = write_gguf(folder / "target.gguf", TARGET, random_weights(TARGET, n_vocab, 0))
    return target, write_head(folder / "head.gguf", TARGET)


def write_head(
    path: Path,
    target: TinyConfig,
    *,
    seed: int = 7,
    layers: tuple[int, int, int] = (1, 2, 3),
    hidden: int | None = None,
    n_vocab: int | None = None,
    arch: str = ARCH,
    more_metadata=None,  # writer -> None: adds or replaces keys (tests of hostile heads)
    drop: tuple[str, ...] = (),  # tensors left out (names, or their beginnings)
    nan: bool = False,  # fc.weight all NaN: a broken head, whose every draft pass gives NaN
) -> Path:
    """hidden: eagle3.target_hidden_size (default the target's n_embd); n_vocab: a vocabulary
    of that many tokens (default the target's): both written wrong to test refusals."""
    import gguf

    tokens, types, merges = vocabulary()
    if n_vocab is not None:
        tokens, types = tokens[:n_vocab], types[:n_vocab]
    hidden = target.n_embd if hidden is None else hidden
    shape = head_shape(hidden, len(tokens), layers=layers)
    writer = gguf.GGUFWriter(str(path), arch)
    write_hparams(writer, shape, n_ctx=target.n_ctx, rope_theta=target.rope_theta,
                  rms_eps=target.rms_eps, dtype=np.dtype(np.float32),
                  name="edgespec-tiny-eagle3")  # fmt: skip
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m for m in merges if m.replace(" ", "") in tokens])
    writer.add_eos_token_id(tokens.index("<|im_end|>") if "<|im_end|>" in tokens else 0)
    if more_metadata is not None:
        more_metadata(writer)
    weights = head_weights(hidden, len(tokens), seed)
    if nan:
        weights["fc.weight"] = np.full_like(weights["fc.weight"], np.nan)
    return write_tensors(writer, {n: a for n, a in weights.items() if not n.startswith(drop)}, path)


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
    return reference_pass(w, embd, tokens, g, cfg)[0]


def reference_draft(
    w: dict[str, np.ndarray],
    embd: np.ndarray,
    context: list[int],
    features: np.ndarray,
    cfg: TinyConfig,
    k: int,
    *,
    fc_norm: np.ndarray | None = None,
    norm_output: bool = False,
) -> np.ndarray:
    """Greedy drafting of k tokens after context, from the target's features [n - 1, 3 * m]
    at its positions: [k, n_vocab] float64 logits of each draft step. EAGLE-3.1 as vLLM and
    speculators define it (speculators' eagle3/core.py): fc_norm [3, m] an RMSNorm per
    feature before fc; norm_output: the state carried on is the final norm's output."""
    from tests.numpy_reference import rms_norm

    x = features.astype(np.float64)
    if fc_norm is not None:
        x = rms_norm(x.reshape(len(x), 3, -1), fc_norm, cfg.rms_eps).reshape(len(x), -1)
    g, tokens, out = x @ w["fc.weight"].T, list(context[1:]), []
    for _ in range(k):
        logits, h = reference_pass(w, embd, tokens, g, cfg)
        out.append(logits[-1])
        carried = rms_norm(h[-1], w["output_norm.weight"], cfg.rms_eps) if norm_output else h[-1]
        g, tokens = np.vstack([g, carried]), [*tokens, int(np.argmax(logits[-1]))]
    return np.array(out)


def reference_pass(
    w: dict[str, np.ndarray], embd: np.ndarray, tokens: list[int], g: np.ndarray, cfg: TinyConfig
) -> tuple[np.ndarray, np.ndarray]:
    """reference_logits, and the decoder's pre-norm output [n, n_embd] float64."""
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
    return rms_norm(out, w["output_norm.weight"], eps) @ w["output.weight"].T, out
