"""The Gumbel-max race: argmin(E / p) over a support, E the position's Exp(1) noise. One race
serves plain and speculative decoding; the noise blocks bound it, so a large support hashes
only the tokens that can win."""

from __future__ import annotations

import math
from typing import Protocol, TypeVar

import numpy as np

from edgespec.sampling.noise import (
    NOISE_BLOCK,
    all_ids,
    block_count,
    block_maxima,
    block_min_noise,
    block_of,
    block_tokens,
    exponential_noise,
    is_all_ids,
    noise_at,
    refuse_nan,
    row_noise_offsets,
)


class Scaled(Protocol):
    def block_weights(self) -> np.ndarray: ...


class RacedDist(Protocol):
    """What a race reads of a distribution (edgespec.sampling.dist.TokenDist): declared
    here so the race does not import the distributions that call it."""

    @property
    def ids(self) -> np.ndarray | None: ...

    @property
    def scaled(self) -> Scaled | None: ...

    @property
    def probs(self) -> np.ndarray: ...

    @property
    def size(self) -> int: ...

    def weights(self, j: np.ndarray | None = None) -> np.ndarray: ...

    def token_at(self, j: int) -> int: ...

    def token_ids(self) -> np.ndarray: ...


FRONT_REACH = 4.0  # a dense race's first reach, in races of its likeliest token (dense_race_front)


# blocks whose smallest noise could win, past which their holders race first (race_front):
# on real rows a few blocks pass; on a flat row (random weights, a high temperature) a large
# share of them do, and hashing every token of them cost more than the whole vocabulary
HOLDERS_FIRST = 16


def reach(races: np.ndarray, places: int) -> float:
    """The places-th smallest race (inf where fewer ran), widened so that rounding never
    skips a token that can reach it."""
    if len(races) < places:
        return math.inf
    return float(
        widened(races.min() if places == 1 else np.partition(races, places - 1)[places - 1])
    )


RaceT = TypeVar("RaceT", float, np.ndarray)


def z_rounding(z_max: RaceT) -> RaceT:
    """How far z - z_max (z = logit / temperature in float32) can lie from its exact value,
    widened: 2^-20 of the largest |z|, and 1e-3 (a float or an array of them)."""
    return 1e-3 + 2.0**-20 * abs(z_max)


def widened(race: RaceT) -> RaceT:
    """A race widened so that rounding never skips a token that can reach it (a float or an
    array of them)."""
    return race * (1.0 + 2.0**-20) + 2.0**-50


def holder_entries(blocks: np.ndarray, holders: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """Entries of a support of n (ids ascending) holding these noise blocks' smallest noise
    (holders: their slots), where the support has them."""
    tokens = block_tokens(blocks, holders)
    if is_all_ids(ids):
        return tokens[tokens < n]
    at = np.searchsorted(ids, tokens)
    inside = at < n
    at, tokens = at[inside], tokens[inside]
    return at[ids[at] == tokens]


def tokens_of_blocks(blocks: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """Indices into a support of n entries (ids ascending; all_ids(n): the dense row) of its
    tokens in the noise blocks `blocks`."""
    if is_all_ids(ids):  # the dense row: every slot of the blocks, cut at its end
        j = block_tokens(blocks[:, None], all_ids(NOISE_BLOCK)).ravel()
        return j[j < n]
    return np.flatnonzero(np.isin(block_of(ids), blocks))


def true_at(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.nonzero of a 2-D mask (rows, columns), found as flat indices: numpy's 2-D nonzero
    costs 5x as much, and a sampled step makes several (docs/decisions.md)."""
    return np.divmod(np.flatnonzero(mask), max(mask.shape[1], 1))


def divide_races(noise: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """E / p in float64, inf where p is 0 (or so small that E / p overflows): [m] each."""
    with np.errstate(over="ignore"):  # a scaled row's weight of 1e-310
        return np.divide(noise, probs, out=np.full(len(noise), np.inf), where=probs > 0)


RACE_FRONT = 256  # the likeliest tokens a large race runs first

RACE_FRONT_MIN = 16_384  # a Gumbel race over this many tokens or more runs its front first

COLUMN_ROWS = 64  # tokens per column of the grid upper_set bounds the k-th value with


def down_maxima(rows: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Each column's largest entry down a grid [..., r, c] (a view of rows [..., V]), by
    np.fmax's reduction (faster than np.maximum's on rows not yet in cache: docs/decisions.md).
    A row holding NaN is refused (refuse_nan)."""
    refuse_nan(rows)
    return np.fmax.reduce(grid, axis=-2)


def upper_set(row: np.ndarray, m: int, scale: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Every token whose z = row / scale reaches a bound t <= the m-th largest z, with its z:
    (ids ascending, z), a superset of the m largest and of any ties with them, so that sorted
    by z it is a prefix of the whole row sorted by z.

    The row is viewed as a grid of COLUMN_ROWS rows; its columns are disjoint sets of tokens,
    so the m-th largest column maximum t has at least m tokens at or above it. One pass over
    the vocabulary finds the maxima; the tokens >= t are looked for in the columns whose
    maximum reaches t only (about m of them). Dividing the maxima instead of the row gives
    the same t: division by a positive float32 is monotone.
    """
    n_cols = len(row) // COLUMN_ROWS
    if n_cols < 4 * m:  # too few columns to narrow anything: bound the whole row
        z = row / scale
        t = np.partition(z, len(z) - m)[len(z) - m] if m < len(z) else z.min()
        ids = np.flatnonzero(z >= t)
        return ids, z[ids]
    n = n_cols * COLUMN_ROWS
    grid = row[:n].reshape(COLUMN_ROWS, n_cols)  # token r * n_cols + c sits at [r, c]
    tail = row[n:] / scale  # fewer than COLUMN_ROWS tokens, each a column of its own
    col_max = np.concatenate([down_maxima(row, grid) / scale, tail])
    t = np.partition(col_max, len(col_max) - m)[len(col_max) - m]
    cols = np.flatnonzero(col_max[:n_cols] >= t)
    block = grid[:, cols] / scale  # [COLUMN_ROWS, len(cols)]
    found = np.flatnonzero(block >= t)  # flat: np.nonzero's two arrays cost 3x as much
    r, c = np.divmod(found, len(cols))
    in_tail = np.flatnonzero(tail >= t)
    ids = np.concatenate([r * n_cols + cols[c], n + in_tail])
    z = np.concatenate([block.ravel()[found], tail[in_tail]])
    order = np.argsort(ids)
    return ids[order], z[order]


def supports_race(
    ids: np.ndarray, weights: np.ndarray, sizes: np.ndarray, seed: int, position: int
) -> np.ndarray:
    """[n] the Gumbel-max token of n supports laid end to end (row i: sizes[i] entries, ids
    ascending, at position + i), raced in one hash call; -1 for an empty one. Ties: the
    lowest id, as argmin over an ascending support gives it."""
    n = len(sizes)
    tokens = np.full(n, -1, dtype=np.int64)
    if not len(ids):
        return tokens
    row_of = np.repeat(np.arange(n), sizes)
    token_offsets, block_offsets = row_noise_offsets(seed, position, n)
    races = divide_races(noise_at(ids, token_offsets[row_of], block_offsets[row_of]), weights)
    order = np.lexsort((races, row_of))  # stable: a tie keeps the lower id first
    filled = sizes > 0
    starts = np.cumsum(sizes) - sizes
    tokens[filled] = ids[order[starts[filled]]]
    return tokens


def gumbel_max(dist: RacedDist, seed: int, position: int) -> int:
    """The token at `position` of the request with this seed: argmax(log p + g) with g
    the position's Gumbel noise, as argmin(E / p) over the support with E = exp(-g) ~
    Exp(1) (exponential_noise): one uniform per token that can be drawn, and the token
    follows p exactly. A drafter that takes argmax(log q + g) with the same g proposes the
    target's own token whenever the two agree (the coupling verify_gumbel relies on)."""
    if dist.size < RACE_FRONT_MIN:  # a small support races whole
        return dist.token_at(int(np.argmin(race_all(dist, seed, position))))
    j, races = race_front(dist, seed, position, places=1)
    return dist.token_at(int(j[np.argmin(races)]))


def gumbel_max_margin(dist: RacedDist, seed: int, position: int) -> tuple[int, float]:
    """gumbel_max's token and how far it won: the gap between the largest and the second
    largest log p + g, log(r2 / r1) of the two smallest E / p (inf where one token can be
    drawn). A Gumbel draft's confidence: the target's p, close to q, keeps the draft's
    token where its own perturbed scores keep that order, likelier the wider the gap."""
    j, races = race_front(dist, seed, position, places=2)
    token = dist.token_at(int(j[np.argmin(races)]))
    if len(races) < 2:
        return token, math.inf
    first, second = np.partition(races, 1)[:2]
    return token, float(np.log(second / first))


def race_all(dist: RacedDist, seed: int, position: int) -> np.ndarray:
    """E / p per token of the support (p: weights()), E the position's Exp(1) noise: the
    smallest wins. A token of probability 0 (an exp underflow) gets inf, even where its E
    is 0."""
    ids = dist.token_ids()
    return divide_races(exponential_noise(seed, position, ids), dist.weights())


def race_front(
    dist: RacedDist, seed: int, position: int, places: int
) -> tuple[np.ndarray, np.ndarray]:
    """(j ascending, races[j]): entries of the support, as indices into probs, holding
    every entry whose race is at most the places-th smallest (1 or 2), so that their
    first argmin (and, for 2, their two smallest races) are the whole support's.

    A token j of noise block b races at least e_min[b] / p_j, e_min[b] its block's
    smallest noise (block_min_noise: one hash a block). Given r, a bound on the
    places-th smallest race, only tokens with e_min[b] <= r p_j can reach it, and only
    blocks whose largest p reaches e_min / r hold any: those few tokens are hashed
    (dense_race_front, sparse_race_front). Below RACE_FRONT_MIN tokens the whole race
    costs less than the fixed work."""
    n = dist.size
    if n < RACE_FRONT_MIN:
        return np.arange(n), race_all(dist, seed, position)
    if dist.ids is None:
        return dense_race_front(dist, seed, position, places)
    return sparse_race_front(dist, seed, position, places)


def dense_race_front(
    dist: RacedDist, seed: int, position: int, places: int
) -> tuple[np.ndarray, np.ndarray]:
    """race_front of a dense row. Each noise block is bounded by its own largest weight
    (block_maxima: one strided pass over the row): a token j of block b races at least
    e_min[b] / p_j >= e_min[b] / w_max[b]. Given a reach R, only tokens with e_min[b] <=
    R p_j can race below R, and only blocks with e_min <= R w_max hold any: those few are
    hashed, in one call. R starts at FRONT_REACH races of the likeliest token (its noise
    is that far above its mean 1 once in 50 rows), or the holders' (a block's holder
    races for free: its noise is the block's smallest); where the places-th smallest race
    found lies above R, R rises to it and the tokens it adds race too."""
    n = dist.size
    w_max = dist.scaled.block_weights() if dist.scaled is not None else block_maxima(dist.probs)
    e_min, holder = block_min_noise(seed, position, all_ids(len(w_max)))
    w_top = float(w_max.max())
    reach_s = FRONT_REACH * places / w_top
    j, races = np.empty(0, np.int64), np.empty(0)
    blocks = np.flatnonzero(e_min <= reach_s * w_max)
    if len(blocks) > HOLDERS_FIRST:  # a flat row: the tokens holding those blocks'
        # smallest noise race first, unhashed (their noise is e_min), and lower the reach
        j = block_tokens(blocks, holder[blocks])
        inside = j < n  # a block's smallest may sit on a slot past the row's end
        j, blocks = j[inside], blocks[inside]
        order = np.argsort(j)
        j, blocks = j[order], blocks[order]
        races = divide_races(e_min[blocks], dist.weights(j))
        reach_s = min(reach_s, reach(races, places))
    held = j  # ascending
    hashed_to = 0.0  # tokens with e_min <= hashed_to * p_j have raced
    while True:
        more = tokens_of_blocks(np.flatnonzero(e_min <= reach_s * w_max), all_ids(n), n)
        bound = e_min[block_of(more)]
        w = dist.weights(more)
        more = more[(bound <= reach_s * w) & (bound > hashed_to * w)]
        if len(held):
            more = more[~np.isin(more, held)]
        j = np.concatenate([j, more])
        races = np.concatenate([races, race_of(dist, more, seed, position)])
        r = reach(races, places)
        if r <= reach_s:
            break
        if not math.isfinite(r):  # fewer than `places` raced: look 64x as far, then
            if reach_s > FRONT_REACH * 2.0**40 / w_top:  # everywhere (all others p = 0)
                return np.arange(n), race_all(dist, seed, position)
            r = reach_s * 64.0
        hashed_to, reach_s = reach_s, r
    front = races <= r
    j, races = j[front], races[front]
    order = np.argsort(j)
    return j[order], races[order]


def sparse_race_front(
    dist: RacedDist, seed: int, position: int, places: int
) -> tuple[np.ndarray, np.ndarray]:
    """race_front of a sparse support: its likeliest m tokens race first (upper_set:
    every other token has p below their smallest, p_b), r is the places-th smallest of
    their races, and a block can hold another token that reaches r only if e_min <= r
    p_b. Where many blocks pass (a flat support), the tokens holding their smallest
    noise race first, unhashed (their noise is e_min), and tighten r."""
    ids, n = dist.token_ids(), dist.size
    front = upper_set(dist.probs, min(RACE_FRONT, n // COLUMN_ROWS // 4), np.float32(1.0))[0]
    j, races = front, race_of(dist, front, seed, position)
    p_b = float(dist.probs[front].min())
    if not (p_b > 0.0 and math.isfinite(reach(races, places))):
        return np.arange(n), race_all(dist, seed, position)
    e_min, holder = block_min_noise(seed, position, all_ids(block_count(int(ids[-1]) + 1)))
    blocks = np.flatnonzero(e_min <= reach(races, places) * p_b)
    held = np.empty(0, np.int64)
    if len(blocks) > HOLDERS_FIRST:
        held = np.sort(holder_entries(blocks, holder[blocks], ids, n))
        held = held[~np.isin(held, front)]
        held_races = divide_races(e_min[block_of(ids[held])], dist.weights(held))
        j, races = np.concatenate([j, held]), np.concatenate([races, held_races])
        blocks = blocks[e_min[blocks] <= reach(races, places) * p_b]
    more = tokens_of_blocks(blocks, ids, n)
    more = more[e_min[block_of(ids[more])] <= reach(races, places) * dist.weights(more)]
    more = more[~np.isin(more, front) & ~np.isin(more, held)]
    j = np.concatenate([j, more])
    races = np.concatenate([races, race_of(dist, more, seed, position)])
    order = np.argsort(j)
    return j[order], races[order]


def race_of(dist: RacedDist, j: np.ndarray, seed: int, position: int) -> np.ndarray:
    """E / p of entries j, each hashed (exponential_noise)."""
    return divide_races(exponential_noise(seed, position, dist.token_ids()[j]), dist.weights(j))
