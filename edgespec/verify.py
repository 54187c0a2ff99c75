"""Draft verification: pure functions of arrays, shared by every drafter.

p is the target's distribution, q the draft's. Greedy and random paths are kept apart
(vLLM's rejection sampler does the same): greedy compares draft tokens with the target's
argmax; random is the rejection sampling of Leviathan et al. 2023 / Chen et al. 2023, which
emits tokens distributed exactly as the target's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgespec.sampling import TokenDist


@dataclass(frozen=True)
class Verdict:
    n_accepted: int  # draft tokens kept
    tokens: np.ndarray  # [n_accepted + 1] int32: the accepted tokens, then one recovered or bonus


def verify_greedy(draft: np.ndarray, target_logits: np.ndarray) -> Verdict:
    """draft: [k] int32; target_logits: [k+1, V] float32, row i scores the token after draft[:i].

    Every emitted token is the verify pass's argmax, so the output equals the target's own.
    """
    k = len(draft)
    argmax = np.argmax(target_logits[: k + 1], axis=-1).astype(np.int32)  # [k+1]
    mismatch = np.flatnonzero(argmax[:k] != draft)
    n_accepted = int(mismatch[0]) if mismatch.size else k
    return Verdict(n_accepted, argmax[: n_accepted + 1])


def verify_stochastic(
    draft: np.ndarray,  # [k] int32
    q: np.ndarray | None,  # [k, V] float32, the draft's distributions; None = point masses
    p: np.ndarray | Callable[[int], TokenDist],  # [k+1, V] float32, or row i -> p at i
    rng: np.random.Generator,
) -> Verdict:
    """Accept draft[i] with probability min(1, p(x)/q(x)); at the first rejection draw the
    recovered token from normalize(max(0, p - q)); if all k pass, draw the bonus from p[k].

    With q = None the draft is a point mass at x: accept with probability p(x), and the
    residual is p with x removed, renormalized. Given as a function, p is computed only for
    the rows verification reaches: a rejection at i leaves rows after i untouched.
    """
    k = len(draft)
    p_at = p if callable(p) else lambda i: TokenDist(None, p[i])
    for i in range(k):
        x = int(draft[i])
        p_i = p_at(i)
        px = p_i.prob(x)
        qx = 1.0 if q is None else float(q[i, x])
        if rng.random() * qx < px:  # u < p(x)/q(x) without dividing by a tiny q(x)
            continue
        recovered = residual_dist(p_i, None if q is None else q[i], x).sample(rng)
        return Verdict(i, np.append(draft[:i], recovered).astype(np.int32))
    bonus = p_at(k).sample(rng)
    return Verdict(k, np.append(draft, bonus).astype(np.int32))


def residual_dist(p: TokenDist, q: np.ndarray | None, x: int) -> TokenDist:
    """residual() on p's support only: max(0, p - q) is 0 wherever p is 0."""
    if p.ids is None:
        return TokenDist(None, residual(p.probs, q, x))
    if q is None:
        r = np.where(p.ids == x, np.float32(0.0), p.probs)
    else:
        r = np.maximum(p.probs - q[p.ids], 0.0)
    total = r.sum()
    if total <= 0:
        return p
    support = r > 0
    return TokenDist(p.ids[support], r[support] / total)


def residual(p: np.ndarray, q: np.ndarray | None, x: int) -> np.ndarray:
    """normalize(max(0, p - q)); for a point mass q at x, p with x removed. [V] float32."""
    if q is None:
        r = p.copy()
        r[x] = 0.0
    else:
        r = np.maximum(p - q, 0.0)
    total = r.sum()
    # A rejection has probability 1 - sum(min(p, q)) = sum(max(0, p - q)); an empty residual
    # can only follow a rejection of probability ~0 (float rounding), where p is the answer.
    return r / total if total > 0 else p
