"""RoPE as HF computes it (rotate-half, inverse frequencies with their scaling), shared by the
GGUF writer, the GGUF reader and both ONNX flavours."""

from __future__ import annotations

import numpy as np

from edgespec.errors import ModelFileError

# a GGUF's rope_freqs tensor as a rope_scaling entry: {"rope_type": this, "factors": [...]}
GGUF_FREQ_FACTORS = "gguf_rope_freqs"


def scale_inv_freq(inv_freq: np.ndarray, scaling: dict | None) -> np.ndarray:
    """HF's "linear" and "llama3" RoPE scaling, and llama.cpp's per-frequency divisors (a
    GGUF's rope_freqs tensor, which its converter writes for llama3); others are refused
    rather than guessed."""
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "default":
        return inv_freq
    assert scaling is not None
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
        "llama3 are); export to GGUF instead"
    )


def rope_configs(config: dict, local: list[bool]) -> dict[str, dict]:
    """The RoPE of the global layers (""), and of the sliding ones ("_local": their own base,
    unscaled, as Gemma 3's), each as the config rope_caches reads."""
    configs = {"": config}
    if any(local):
        configs["_local"] = {"rope_theta": config["rope_local_base_freq"], "rope_scaling": None}
    return configs


def rope_caches(config: dict, head_dim: int, n_pos: int) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [n_pos, head_dim/2] float32 of HF's rotate-half RoPE, scaling applied."""
    theta = float(config.get("rope_theta", 10000.0))
    inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    inv_freq = scale_inv_freq(inv_freq, config.get("rope_scaling"))
    angles = np.arange(n_pos, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
