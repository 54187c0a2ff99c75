"""The sampling transform and the verifier as they were before the candidate-set rewrite
(edgespec.sampling and edgespec.verify at e40ea9f): dense over the whole vocabulary,
argpartition for top-k, a full sort for top-p, every row of p computed up front; top-p's
masses in float64 and one normalization since the cut by the tokens near the peak
(top_p_head). The fast path is compared with them token set by token set and seed for
seed."""

from __future__ import annotations

import numpy as np

from edgespec.sampling import SamplingParams


def logits_to_probs(logits: np.ndarray, sp: SamplingParams) -> np.ndarray:
    """[n, V] or [V] float logits -> float32 probabilities of the same shape.

    Tokens cut by top-k, top-p or min-p get probability exactly 0. Each row's weights are
    exp(z - max z); top-p cuts them by float64 masses, min-p by the heaviest, and what is
    left is normalized once.
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
    w = np.exp(z - z.max(axis=-1, keepdims=True))
    if sp.top_p < 1.0:
        w = np.stack([cut_top_p(row, sp.top_p) for row in w])
    if sp.min_p > 0.0:
        w = np.where(w >= sp.min_p * w.max(axis=-1, keepdims=True), w, 0.0)
    probs = (w / w.sum(axis=-1, keepdims=True)).astype(np.float32)
    return probs[0] if squeeze else probs


def cut_top_p(weights: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the smallest set of heaviest tokens of one row whose mass reaches top_p: each
    token while the float64 sum of the weights ahead of it (added in order, ties by id) is
    < top_p times the row's float64 total; the cut ones weigh 0."""
    order = np.argsort(-weights, kind="stable")
    running = np.cumsum(weights[order], dtype=np.float64)
    before = np.concatenate([[0.0], running[:-1]])
    keep = np.empty(len(weights), dtype=bool)
    keep[order] = before < top_p * weights.sum(dtype=np.float64)  # the first is always kept
    return np.where(keep, weights, 0.0)


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a [V] probability vector (inverse CDF, one uniform draw)."""
    cdf = np.cumsum(probs, dtype=np.float64)
    u = rng.random() * cdf[-1]
    return int(min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1))


def verify_stochastic(
    draft: np.ndarray,  # [k] int32
    q: np.ndarray | None,  # [k, V] float32; None = point masses
    p: np.ndarray,  # [k+1, V] float32
    rng: np.random.Generator,
) -> tuple[int, list[int]]:
    """(n_accepted, tokens), as edgespec.verify.verify_stochastic was."""
    k = len(draft)
    for i in range(k):
        x = int(draft[i])
        px = float(p[i, x])
        qx = 1.0 if q is None else float(q[i, x])
        if rng.random() * qx < px:
            continue
        recovered = sample(residual(p[i], None if q is None else q[i], x), rng)
        return i, [*draft[:i].tolist(), recovered]
    return k, [*draft.tolist(), sample(p[k], rng)]


def residual(p: np.ndarray, q: np.ndarray | None, x: int) -> np.ndarray:
    if q is None:
        r = p.copy()
        r[x] = 0.0
    else:
        r = np.maximum(p - q, 0.0)
    total = r.sum()
    return r / total if total > 0 else p
