"""Draft verification: pure functions of arrays, shared by every drafter.

p is the target's distribution, q the draft's. Greedy and random paths are kept apart
(vLLM's rejection sampler does the same): greedy compares draft tokens with the target's
argmax; random is either the Gumbel-max coupling (every emitted token is the target's own
Gumbel-max sample at its position, so the output is plain decoding's, seed for seed) or the
rejection sampling of Leviathan et al. 2023 / Chen et al. 2023. Both emit tokens distributed
exactly as the target's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from edgespec.sampling import PassRows, TokenDist


@dataclass(frozen=True)
class Verdict:
    n_accepted: int  # draft tokens kept
    tokens: np.ndarray  # [n_accepted + 1] int32: the accepted tokens, then one recovered or bonus


def verify_greedy(draft: np.ndarray, target_argmax: np.ndarray) -> Verdict:
    """draft: [k] int32; target_argmax: [k+1], row i's argmax, the target's token after
    draft[:i] (forward_top: the rows reduced on the device where the runtime can).

    Every emitted token is the verify pass's argmax, so the output equals the target's own.
    """
    k = len(draft)
    argmax = np.asarray(target_argmax[: k + 1], dtype=np.int32)  # [k+1]
    mismatch = np.flatnonzero(argmax[:k] != draft)
    n_accepted = int(mismatch[0]) if mismatch.size else k
    return Verdict(n_accepted, argmax[: n_accepted + 1])


def verify_gumbel(
    draft: np.ndarray,  # [k] int32, drafted as argmax(log q + g) (or copied: prompt lookup)
    p: PassRows,  # row i -> the target's p at draft position i (k+1 rows)
    seed: int,
    position: int,  # where row 0's token goes in the whole sequence (prompt included)
) -> Verdict:
    """Emit the target's Gumbel-max token y_i = argmax(log p_i + g_i), g_i the noise of
    (seed, position + i): draft[i] is accepted exactly when it equals y_i, the first mismatch
    emits y_i (recovered), and if all k pass, y_k is the bonus.

    Every emitted token is a function of its prefix and its position's noise alone, so the
    output follows p exactly and equals plain decoding's (k = 0) whatever the steps were. A
    point-mass draft x is accepted with probability p(x), as rejection sampling accepts it;
    a model draft with P(argmax(log p + g) = argmax(log q + g)) <= 1 - TV(p, q).
    """
    k = len(draft)
    every = p.gumbel_maxes(seed, position)
    for i in range(k + 1):
        y = int(every[i])
        if i == k or y != int(draft[i]):
            return Verdict(i, np.append(draft[:i], y).astype(np.int32))
    raise AssertionError("unreachable: row k always returns")


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
