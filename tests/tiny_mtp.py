"""A tiny random GLM-4.5-architecture ("glm4moe") target with one MTP (NextN) layer, as
llama.cpp reads one, written in the test run (no downloads), and that MTP layer's graph
(src/models/glm4-moe.cpp graph_mtp) in numpy.

Trunk: layer 0 dense, layer 1 a mixture of experts (sigmoid gating, top 2 of 4, a shared
expert), as GLM-4.5 leads with dense layers; the MTP layer (block n_layer) is a MoE decoder
layer behind nextn.enorm/hnorm/eh_proj, with no head of its own (it borrows output_norm and
output). The tokenizer is tests/tiny_gguf's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.numpy_reference import rms_norm, rope
from tests.tiny_gguf import (
    TinyConfig,
    add_hparams,
    add_tokenizer,
    random_weights,
    vocabulary,
    write_tensors,
)

ARCH = "glm4moe"
TARGET = TinyConfig(n_layer=2)
N_EXPERT, N_EXPERT_USED, N_FF_EXP = 4, 2, 32


def mtp_weights(cfg: TinyConfig, n_vocab: int, seed: int) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in PyTorch (out, in) layout: the trunk's n_layer
    blocks and the MTP block n_layer."""
    blocks = TinyConfig(n_layer=cfg.n_layer + 1, n_embd=cfg.n_embd, n_head=cfg.n_head,
                        n_head_kv=cfg.n_head_kv, n_ff=cfg.n_ff)  # fmt: skip
    rng = np.random.default_rng(seed + 100)
    d = cfg.n_embd

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    tensors = {
        name.replace("ffn_norm", "post_attention_norm"): a
        for name, a in random_weights(blocks, n_vocab, seed).items()
    }
    for i in range(1, cfg.n_layer + 1):  # every block after the first: experts
        for dense in ("ffn_gate", "ffn_up", "ffn_down"):
            del tensors[f"blk.{i}.{dense}.weight"]
        tensors |= {
            f"blk.{i}.ffn_gate_inp.weight": w(N_EXPERT, d),
            f"blk.{i}.exp_probs_b.bias": np.zeros(N_EXPERT, np.float32),
            f"blk.{i}.ffn_gate_exps.weight": w(N_EXPERT, N_FF_EXP, d),
            f"blk.{i}.ffn_up_exps.weight": w(N_EXPERT, N_FF_EXP, d),
            f"blk.{i}.ffn_down_exps.weight": w(N_EXPERT, d, N_FF_EXP),
            f"blk.{i}.ffn_gate_shexp.weight": w(N_FF_EXP, d),
            f"blk.{i}.ffn_up_shexp.weight": w(N_FF_EXP, d),
            f"blk.{i}.ffn_down_shexp.weight": w(d, N_FF_EXP),
        }
    m = cfg.n_layer
    return tensors | {
        f"blk.{m}.nextn.eh_proj.weight": w(d, 2 * d),
        f"blk.{m}.nextn.enorm.weight": np.ones(d, np.float32),
        f"blk.{m}.nextn.hnorm.weight": np.ones(d, np.float32),
    }


def write_mtp_target(path: Path, cfg: TinyConfig = TARGET, *, seed: int = 0,
                     mtp_layers: int = 1, declared: int | None = None,
                     drop: tuple[str, ...] = ()) -> Path:  # fmt: skip
    """The tiny glm4moe target; mtp_layers=0 writes the trunk alone (no MTP layer).
    declared: the nextn_predict_layers written (default mtp_layers); drop: tensors left out, by
    name or its beginning (both to test refusals)."""
    import gguf

    tokens, types, merges = vocabulary()
    tensors = mtp_weights(cfg, len(tokens), seed)
    if not mtp_layers:
        tensors = {n: a for n, a in tensors.items() if not n.startswith(f"blk.{cfg.n_layer}.")}
    tensors = {n: a for n, a in tensors.items() if not n.startswith(drop)}
    declared = mtp_layers if declared is None else declared
    writer = gguf.GGUFWriter(str(path), ARCH)
    add_hparams(writer, cfg, "edgespec-tiny-mtp", n_layer=cfg.n_layer + mtp_layers)
    writer.add_head_count_kv(cfg.n_head_kv)
    writer.add_uint32(f"{ARCH}.nextn_predict_layers", declared)
    writer.add_expert_count(N_EXPERT)
    writer.add_expert_used_count(N_EXPERT_USED)
    writer.add_expert_shared_count(1)
    writer.add_expert_feed_forward_length(N_FF_EXP)
    writer.add_leading_dense_block_count(1)
    writer.add_expert_weights_norm(True)
    writer.add_expert_weights_scale(1.0)
    add_tokenizer(writer, (tokens, types, merges))
    return write_tensors(writer, tensors, path)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def moe(w: dict[str, np.ndarray], il: int, x: np.ndarray) -> np.ndarray:
    """llama.cpp's build_moe_ffn with sigmoid gating, selection bias, normalised weights;
    plus the shared expert. x [n, d]."""
    p = f"blk.{il}."
    probs = 1 / (1 + np.exp(-(x @ w[p + "ffn_gate_inp.weight"].T)))  # [n, E]
    chosen = np.argsort(-(probs + w[p + "exp_probs_b.bias"]), axis=1)[:, :N_EXPERT_USED]
    out = np.zeros_like(x)
    for row, experts in enumerate(chosen):
        weights = probs[row, experts] / probs[row, experts].sum()
        for e, weight in zip(experts, weights):
            gate = x[row] @ w[p + "ffn_gate_exps.weight"][e].T
            up = x[row] @ w[p + "ffn_up_exps.weight"][e].T
            out[row] += weight * (silu(gate) * up) @ w[p + "ffn_down_exps.weight"][e].T
    shared = silu(x @ w[p + "ffn_gate_shexp.weight"].T) * (x @ w[p + "ffn_up_shexp.weight"].T)
    return out + shared @ w[p + "ffn_down_shexp.weight"].T


def reference_mtp(
    w: dict[str, np.ndarray], tokens: list[int], h: np.ndarray, cfg: TinyConfig = TARGET
) -> tuple[np.ndarray, np.ndarray]:
    """The MTP layer of src/models/glm4-moe.cpp in numpy, from position 0: pairs (tokens[i],
    h[i]). (logits [n, n_vocab], its own final state [n, d]) float64."""
    il, eps, n = cfg.n_layer, cfg.rms_eps, len(tokens)
    p = f"blk.{il}."
    e = rms_norm(
        w["token_embd.weight"][tokens].astype(np.float64), w[p + "nextn.enorm.weight"], eps
    )
    x = np.concatenate([e, rms_norm(h, w[p + "nextn.hnorm.weight"], eps)], axis=1)
    x = x @ w[p + "nextn.eh_proj.weight"].T
    cur = rms_norm(x, w[p + "attn_norm.weight"], eps)
    n_head, n_kv = cfg.n_head, cfg.n_head_kv

    def proj(name: str, heads: int) -> np.ndarray:
        return (cur @ w[p + f"attn_{name}.weight"].T).reshape(n, heads, -1).transpose(1, 0, 2)

    q, k = rope(proj("q", n_head), cfg.rope_theta), rope(proj("k", n_kv), cfg.rope_theta)
    k, v = np.repeat(k, n_head // n_kv, 0), np.repeat(proj("v", n_kv), n_head // n_kv, 0)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]) + np.triu(np.full((n, n), -np.inf), 1)
    att = np.exp(scores - scores.max(-1, keepdims=True))
    att /= att.sum(-1, keepdims=True)
    ffn_inp = (att @ v).transpose(1, 0, 2).reshape(n, -1) @ w[p + "attn_output.weight"].T + x
    out = ffn_inp + moe(w, il, rms_norm(ffn_inp, w[p + "post_attention_norm.weight"], eps))
    state = rms_norm(out, w["output_norm.weight"], eps)
    return state @ w["output.weight"].T, state
