"""Sampling parameters and the one logits -> probabilities transform that target and draft share.

The order of the filters follows llama.cpp's default sampler chain: temperature scales the
logits, then top-k, top-p and min-p cut the tail of the resulting distribution, and what is
left is renormalized. Greedy (temperature 0) never comes through here: it is an argmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgespec.errors import SamplingParamsError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy argmax
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    seed: int | None = None

    def __post_init__(self) -> None:
        check_range("temperature", self.temperature, 0.0, math.inf, "use 0 for greedy decoding")
        check_range("top_p", self.top_p, 0.0, 1.0, "use 1.0 to turn it off", open_low=True)
        check_range("min_p", self.min_p, 0.0, 1.0, "use 0.0 to turn it off", open_high=True)
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise SamplingParamsError(
                f"top_k must be a whole number >= 0, got {self.top_k!r}; use 0 to turn it off"
            )
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise SamplingParamsError(f"seed must be a whole number >= 0, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def check_range(
    name: str,
    value: float,
    low: float,
    high: float,
    fix: str,
    *,
    open_low: bool = False,
    open_high: bool = False,
) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if open_low else value >= low) and (
            value < high if open_high else value <= high
        )
    if not ok:
        lo, hi = ("(" if open_low else "["), (")" if open_high else "]")
        raise SamplingParamsError(f"{name} must be in {lo}{low}, {high}{hi}, got {value!r}; {fix}")


def logits_to_probs(logits: np.ndarray, sp: SamplingParams) -> np.ndarray:
    """[n, V] or [V] float logits -> float32 probabilities of the same shape.

    Tokens cut by top-k, top-p or min-p get probability exactly 0.
    """
    if sp.greedy:
        raise ValueError("greedy decoding takes the argmax; it has no probability vector")
    z = np.asarray(logits, dtype=np.float32) / np.float32(sp.temperature)
    squeeze = z.ndim == 1
    z = np.atleast_2d(z)
    if sp.top_k and sp.top_k < z.shape[-1]:
        keep = np.argpartition(-z, sp.top_k - 1, axis=-1)[:, : sp.top_k]  # exactly k, ties too
        cut = np.full_like(z, -np.inf)
        np.put_along_axis(cut, keep, np.take_along_axis(z, keep, axis=-1), axis=-1)
        z = cut
    probs = softmax(z)
    if sp.top_p < 1.0:
        probs = cut_top_p(probs, sp.top_p)
    if sp.min_p > 0.0:
        probs = np.where(probs >= sp.min_p * probs.max(axis=-1, keepdims=True), probs, 0.0)
        probs = (probs / probs.sum(axis=-1, keepdims=True)).astype(np.float32)
    return probs[0] if squeeze else probs


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def cut_top_p(probs: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose mass reaches top_p."""
    order = np.argsort(-probs, axis=-1, kind="stable")  # [n, V]
    sorted_probs = np.take_along_axis(probs, order, axis=-1)
    mass_before = np.cumsum(sorted_probs, axis=-1) - sorted_probs
    keep_sorted = mass_before < top_p  # the first token is always kept
    keep = np.empty_like(keep_sorted)
    np.put_along_axis(keep, order, keep_sorted, axis=-1)
    cut = np.where(keep, probs, 0.0)
    return (cut / cut.sum(axis=-1, keepdims=True)).astype(np.float32)


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a [V] probability vector (inverse CDF, one uniform draw)."""
    cdf = np.cumsum(probs, dtype=np.float64)
    u = rng.random() * cdf[-1]
    return int(min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1))
