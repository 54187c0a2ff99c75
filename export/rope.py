"""RoPE as HF computes it (rotate-half, inverse frequencies with their scaling), shared by the
GGUF writer, the GGUF reader and both ONNX flavours."""

from __future__ import annotations

import math

import numpy as np

from edgespec.errors import ModelFileError

# a GGUF's rope_freqs tensor as a rope_scaling entry: {"rope_type": this, "factors": [...]}
GGUF_FREQ_FACTORS = "gguf_rope_freqs"


def scaling_kind(scaling: dict | None) -> str:
    """HF's rope_type (older configs: type; Phi-3's first 128k configs: "su", now longrope)."""
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    return "longrope" if kind == "su" else kind


def scale_inv_freq(inv_freq: np.ndarray, scaling: dict | None) -> np.ndarray:
    """HF's "linear", "llama3" and "longrope" RoPE scaling (longrope's short factors: see
    context_limit), and llama.cpp's per-frequency divisors (a GGUF's rope_freqs tensor, which
    its converter writes for llama3); others are refused rather than guessed."""
    kind = scaling_kind(scaling)
    if kind == "default":
        return inv_freq
    assert scaling is not None
    if kind == "longrope":
        return inv_freq / short_factors(scaling, len(inv_freq))
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind == GGUF_FREQ_FACTORS:
        return inv_freq / np.asarray(scaling["factors"], np.float64)
    if kind == "llama3":
        factor, low, high = (
            scaling["factor"],
            scaling["low_freq_factor"],
            scaling["high_freq_factor"],
        )
        old_ctx = scaling["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv_freq
        smooth = (old_ctx / wavelen - low) / (high - low)
        mid = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        scaled = np.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
        is_mid = (wavelen <= old_ctx / low) & (wavelen >= old_ctx / high)
        return np.where(is_mid, mid, scaled)
    raise ModelFileError(
        f"rope_scaling type {kind!r} is not supported by the ONNX exporter (default, linear, "
        "llama3, longrope are); export to GGUF instead"
    )


def short_factors(scaling: dict, n_freq: int) -> np.ndarray:
    """longrope's divisor per frequency up to the original context, one per rotated pair."""
    factors = np.asarray(scaling.get("short_factor") or [], np.float64)
    if factors.shape != (n_freq,):
        raise ModelFileError(
            f"rope_scaling short_factor has {factors.size} entries where the rotary dimension "
            f"needs {n_freq} (one per rotated pair); check config.json"
        )
    return factors


def attention_factor(config: dict) -> float:
    """longrope's scale on cos and sin (so on every q.k twice), as HF computes it: given, or
    sqrt(1 + ln(s) / ln(original context)) with s the context's stretch; 1 elsewhere."""
    scaling = config.get("rope_scaling")
    if scaling_kind(scaling) != "longrope":
        return 1.0
    assert scaling is not None
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    original = config.get("original_max_position_embeddings")
    stretch = config["max_position_embeddings"] / original if original else scaling["factor"]
    original = original or config["max_position_embeddings"]
    return 1.0 if stretch <= 1 else math.sqrt(1 + math.log(stretch) / math.log(original))


def context_limit(config: dict) -> int:
    """The longest context the graph computes as the model does. longrope: its original one,
    where HF and llama.cpp use the short factors; past it both switch every position, cached
    keys included, to the long factors, which a graph with fixed RoPE tables cannot do."""
    limit = None
    if scaling_kind(config.get("rope_scaling")) == "longrope":
        limit = config.get("original_max_position_embeddings")
    limit = limit or config.get("max_position_embeddings", 4096)
    return int(limit)


def rope_notes(config: dict) -> list[str]:
    """What the export report says of the RoPE: a context cut by context_limit."""
    limit, trained = context_limit(config), config.get("max_position_embeddings", 4096)
    if limit >= trained:
        return []
    return [f"context {trained} cut to {limit}: longrope's long factors are not computed"]


def rotary_dim(config: dict, head_dim: int) -> int:
    """How many of each head's dimensions RoPE turns (partial_rotary_factor: Phi-4 mini's
    0.75); the rest pass through unrotated."""
    return int(head_dim * float(config.get("partial_rotary_factor", 1.0)))


def rope_configs(config: dict, local: list[bool]) -> dict[str, dict]:
    """The RoPE of the global layers (""), and of the sliding ones ("_local": their own base,
    unscaled, as Gemma 3's), each as the config rope_caches reads."""
    configs = {"": config}
    if any(local):
        configs["_local"] = {"rope_theta": config["rope_local_base_freq"], "rope_scaling": None}
    return configs


def rope_caches(
    config: dict, head_dim: int, n_pos: int, pairs_multiple: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [n_pos, rotary_dim/2] float32 of HF's rotate-half RoPE, scaling applied; a
    partial rotation's pairs a multiple of pairs_multiple (what the attention kernel takes)."""
    theta = float(config.get("rope_theta", 10000.0))
    dim = rotary_dim(config, head_dim)
    if dim < head_dim and (dim // 2) % pairs_multiple:
        raise ModelFileError(
            f"partial_rotary_factor {config['partial_rotary_factor']} turns {dim} of {head_dim} "
            f"dimensions of a head, and ONNX Runtime's GroupQueryAttention turns a multiple of "
            f"{2 * pairs_multiple}; export with --format tensorrt or to GGUF instead"
        )
    inv_freq = theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    inv_freq = scale_inv_freq(inv_freq, config.get("rope_scaling"))
    angles = np.arange(n_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    scale = attention_factor(config)
    return (scale * np.cos(angles)).astype(np.float32), (scale * np.sin(angles)).astype(np.float32)
