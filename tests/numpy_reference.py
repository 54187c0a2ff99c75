"""A plain float64 numpy forward pass of a Llama/Mistral/Qwen2/Qwen3 (Gemma 3, Phi-3) HF
checkpoint: the reference that llama.cpp's (and ONNX Runtime's) logits are compared with."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def load(folder: Path) -> tuple[dict, dict[str, np.ndarray]]:
    from safetensors.numpy import load_file

    config = json.loads((folder / "config.json").read_text())
    weights = {k: v.astype(np.float64) for k, v in load_file(folder / "model.safetensors").items()}
    return config, weights


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def llama3_scaled(inv_freq: np.ndarray, s: dict) -> np.ndarray:
    """Llama 3.1's rope_scaling, as its paper's code writes it: long wavelengths divided by
    the factor, short ones kept, a smooth blend between."""
    out = []
    for f in inv_freq:
        wavelen = 2 * np.pi / f
        old = s["original_max_position_embeddings"]
        if wavelen < old / s["high_freq_factor"]:
            out.append(f)
        elif wavelen > old / s["low_freq_factor"]:
            out.append(f / s["factor"])
        else:
            smooth = (old / wavelen - s["low_freq_factor"]) / (
                s["high_freq_factor"] - s["low_freq_factor"]
            )
            out.append((1 - smooth) * f / s["factor"] + smooth * f)
    return np.array(out)


def rope(x: np.ndarray, theta: float, scaling: dict | None = None) -> np.ndarray:
    """HF RoPE: rotate the two halves of each head. x: [n_head, n, head_dim]."""
    n, hd = x.shape[1], x.shape[2]
    inv_freq = theta ** (-np.arange(0, hd, 2) / hd)  # [hd/2]
    if scaling:  # llama3 only
        inv_freq = llama3_scaled(inv_freq, scaling)
    angles = np.arange(n)[:, None] * inv_freq[None, :]  # [n, hd/2]
    cos, sin = np.cos(angles), np.sin(angles)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def forward(folder: Path, tokens: list[int]) -> np.ndarray:
    """[len(tokens), n_vocab] float64 logits."""
    cfg, w = load(folder)
    n_head, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    x = w["model.embed_tokens.weight"][tokens]  # [n, d]
    n = len(tokens)
    mask = np.triu(np.full((n, n), -np.inf), k=1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)

        def proj(name: str, heads: int, h=h, p=p) -> np.ndarray:
            y = h @ w[p + f"self_attn.{name}_proj.weight"].T
            y = y + w.get(p + f"self_attn.{name}_proj.bias", 0.0)
            y = y.reshape(n, heads, -1).transpose(1, 0, 2)  # [heads, n, hd]
            norm = w.get(p + f"self_attn.{name}_norm.weight")  # Qwen3: each head normed
            return y if norm is None else rms_norm(y, norm, eps)

        scaling = cfg.get("rope_scaling")
        q, k = rope(proj("q", n_head), theta, scaling), rope(proj("k", n_kv), theta, scaling)
        v = proj("v", n_kv)
        k, v = np.repeat(k, n_head // n_kv, axis=0), np.repeat(v, n_head // n_kv, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]) + mask
        att = np.exp(scores - scores.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        out = (att @ v).transpose(1, 0, 2).reshape(n, -1)
        x = x + out @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])  # tied where absent
    return rms_norm(x, w["model.norm.weight"], eps) @ head.T


def gemma3_forward(folder: Path, tokens: list[int]) -> np.ndarray:
    """[len(tokens), n_vocab] float64 logits of a Gemma 3 text checkpoint: norms scale by
    1 + w, the embedding by sqrt(hidden_size), q and k normed per head, sandwich norms around
    both branches, GeGLU (tanh GELU), sliding layers attending to their last `sliding_window`
    positions with RoPE base rope_local_base_freq, full layers with rope_theta."""
    cfg, w = load(folder)
    n_head, n_kv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        return rms_norm(x, 1.0 + w[name], eps)

    n = len(tokens)
    x = w["model.embed_tokens.weight"][tokens] * np.sqrt(cfg["hidden_size"])
    pos = np.arange(n)
    causal = pos[None, :] <= pos[:, None]
    window = causal & (pos[:, None] - pos[None, :] < cfg["sliding_window"])
    for i, kind in enumerate(cfg["layer_types"]):
        p = f"model.layers.{i}."
        local = kind == "sliding_attention"
        theta = cfg["rope_local_base_freq"] if local else cfg["rope_theta"]
        h = norm(x, p + "input_layernorm.weight")

        def proj(name: str, heads: int, h=h, p=p) -> np.ndarray:
            y = (h @ w[p + f"self_attn.{name}_proj.weight"].T).reshape(n, heads, -1)
            y = y.transpose(1, 0, 2)
            return norm(y, p + f"self_attn.{name}_norm.weight") if name != "v" else y

        q, k, v = rope(proj("q", n_head), theta), rope(proj("k", n_kv), theta), proj("v", n_kv)
        k, v = np.repeat(k, n_head // n_kv, axis=0), np.repeat(v, n_head // n_kv, axis=0)
        scores = q @ k.transpose(0, 2, 1) * cfg["query_pre_attn_scalar"] ** -0.5
        scores = np.where(window if local else causal, scores, -np.inf)
        att = np.exp(scores - scores.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        out = (att @ v).transpose(1, 0, 2).reshape(n, -1) @ w[p + "self_attn.o_proj.weight"].T
        x = x + norm(out, p + "post_attention_layernorm.weight")
        h = norm(x, p + "pre_feedforward_layernorm.weight")
        gate, up = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        gelu = 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate**3)))
        out = (gelu * up) @ w[p + "mlp.down_proj.weight"].T
        x = x + norm(out, p + "post_feedforward_layernorm.weight")
    return norm(x, "model.norm.weight") @ w["model.embed_tokens.weight"].T


def phi3_forward(folder: Path, tokens: list[int]) -> np.ndarray:
    """[len(tokens), n_vocab] float64 logits of a Phi-3 / Phi-4 checkpoint, as HF's Phi3 model
    computes them: Llama's layer with q, k, v cut from one qkv_proj and gate, up from one
    gate_up_proj (gate first); RoPE on the first partial_rotary_factor of each head; longrope
    (within the original context) divides each frequency by its short factor and scales cos
    and sin by sqrt(1 + ln(max / original) / ln(original))."""
    folder = Path(folder)
    cfg, w = load(folder)
    n_head, n_kv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    hd = cfg["hidden_size"] // n_head
    rot = int(hd * cfg.get("partial_rotary_factor", 1.0))
    inv_freq = cfg["rope_theta"] ** (-np.arange(0, rot, 2) / rot)
    scale = 1.0
    if cfg["rope_scaling"]:  # longrope ("su" in the first 128k configs)
        inv_freq = inv_freq / np.array(cfg["rope_scaling"]["short_factor"])
        original = cfg["original_max_position_embeddings"]
        scale = np.sqrt(1 + np.log(cfg["max_position_embeddings"] / original) / np.log(original))
    n = len(tokens)
    angles = np.arange(n)[:, None] * inv_freq[None, :]
    cos, sin = scale * np.cos(angles), scale * np.sin(angles)

    def rope(x: np.ndarray) -> np.ndarray:  # [heads, n, hd]: the first rot dims turn
        x1, x2, rest = x[..., : rot // 2], x[..., rot // 2 : rot], x[..., rot:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], axis=-1)

    x = w["model.embed_tokens.weight"][tokens]
    mask = np.triu(np.full((n, n), -np.inf), k=1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        qkv = (
            rms_norm(x, w[p + "input_layernorm.weight"], eps) @ w[p + "self_attn.qkv_proj.weight"].T
        )
        q, k, v = np.split(qkv, [n_head * hd, (n_head + n_kv) * hd], axis=-1)
        q, k, v = (y.reshape(n, -1, hd).transpose(1, 0, 2) for y in (q, k, v))
        q, k = rope(q), rope(k)
        k, v = np.repeat(k, n_head // n_kv, axis=0), np.repeat(v, n_head // n_kv, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
        att = np.exp(scores - scores.max(-1, keepdims=True))
        att /= att.sum(-1, keepdims=True)
        x = x + (att @ v).transpose(1, 0, 2).reshape(n, -1) @ w[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate, up = np.split(h @ w[p + "mlp.gate_up_proj.weight"].T, 2, axis=-1)
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return rms_norm(x, w["model.norm.weight"], eps) @ head.T
