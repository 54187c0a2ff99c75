"""What a back-end hands over for a verify pass: its rows as distributions (i -> TokenDist),
and every row's Gumbel-max token at once where one call for all rows costs less."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from edgespec.sampling.dist import (
    ScaledRow,
    TokenDist,
    keeps_row,
    kept_top_k,
    scaled_weights,
    token_dist,
    top_k,
    top_k_dist,
)
from edgespec.sampling.noise import (
    NOISE_BLOCK,
    NOISE_STRIDE,
    all_ids,
    block_maxima,
    block_min_e,
    block_tokens,
    every_block_bits,
    noise_at,
    row_noise_offsets,
)
from edgespec.sampling.params import SamplingParams, check_scaled
from edgespec.sampling.race import (
    COLUMN_ROWS,
    FRONT_REACH,
    RACE_FRONT_MIN,
    divide_races,
    down_maxima,
    supports_race,
    true_at,
    widened,
    z_rounding,
)
from edgespec.sampling.spare import (
    row_peaks,
    row_ranges,
    spare_min_p_supports,
)


class PassRows:
    """A verify pass's rows, as every back-end hands them over: i -> row i's TokenDist
    (`dist`, each computed once), and every row's Gumbel-max token at once (gumbel_maxes).
    `maxes` gives those tokens from what the pass kept (-1 for a row it cannot decide, which
    races its own TokenDist); None, or a maxes giving None: the rows' supports race at once.
    `valid`: whether the rows can still be read (a back-end's own buffer, until its next
    pass)."""

    def __init__(
        self,
        n: int,
        dist: Callable[[int], TokenDist],
        maxes: Callable[[int, int], np.ndarray | None] | None = None,
        valid: Callable[[], bool] | None = None,
    ) -> None:
        self.n, self.dist, self.maxes, self.valid = n, dist, maxes, valid
        self.known: dict[int, TokenDist] = {}

    def __call__(self, i: int) -> TokenDist:
        self.check()
        if i not in self.known:
            self.known[i] = self.dist(i)
        return self.known[i]

    def gumbel_maxes(self, seed: int, position: int) -> np.ndarray:
        """[n] row i's gumbel_max(seed, position + i), every row at once."""
        self.check()
        tokens = None if self.maxes is None else self.maxes(seed, position)
        if tokens is None:
            return gumbel_max_supports([self(i) for i in range(self.n)], seed, position)
        for i in np.flatnonzero(tokens < 0).tolist():
            tokens[i] = self(i).gumbel_max(seed, position + i)
        return tokens

    def check(self) -> None:
        if self.valid is not None and not self.valid():
            raise RuntimeError("a step's rows were read after the runtime's next pass")


def row_dists(
    logits: np.ndarray, sp: SamplingParams, valid: Callable[[], bool] | None = None
) -> PassRows:
    """[n, V] logits -> their PassRows: row i's token_dist when asked for, and every row's
    Gumbel-max token at once (logits_maxes). Logits read in a back-end's buffer (valid given)
    that token_dist keeps whole (temperature alone) are copied first: a draft's q outlives
    the pass."""
    copy_first = valid is not None and keeps_row(sp, logits.shape[-1])

    def dist(i: int) -> TokenDist:
        return token_dist(np.array(logits[i]) if copy_first else logits[i], sp)

    def maxes(seed: int, position: int) -> np.ndarray | None:
        return logits_maxes(logits, sp, seed, position)

    return PassRows(len(logits), dist, maxes, valid)


def top_k_rows_of(ids: np.ndarray, z: np.ndarray, sp: SamplingParams) -> PassRows:
    """A step's rows under top-k, as their top k tokens: ids [n, k] ascending in each row and
    their z = logit / temperature (top_k_rows on the host, or the device's columns: llama.cpp's
    backend sampler). Row i is top_k_dist(ids[i], z[i], sp); their Gumbel-max tokens race in
    one call for all rows, each row's arithmetic as top_k_dist's, bit for bit (top_k_probs)."""

    def maxes(seed: int, position: int) -> np.ndarray:
        n, k = ids.shape
        probs = top_k_probs(z, sp)  # 0 where top-p or min-p cut: it races at inf
        token_offsets, block_offsets = row_noise_offsets(seed, position, n)
        row_of = np.repeat(np.arange(n), k)
        noise = noise_at(ids.ravel(), token_offsets[row_of], block_offsets[row_of])
        races = divide_races(noise, probs.ravel()).reshape(n, k)
        return ids[np.arange(n), races.argmin(axis=1)]  # ties: the lowest id

    at_once = not sp.host_only  # top_k_probs cuts top-p and min-p alone
    return PassRows(len(ids), lambda i: top_k_dist(ids[i], z[i], sp), maxes if at_once else None)


def top_k_probs(z: np.ndarray, sp: SamplingParams) -> np.ndarray:
    """[n, k] float32 the probabilities top_k_dist gives each row of z [n, k] (ids ascending),
    0 for a token top-p or min-p cut: its weights exp(z - max z), top-p's cut (heaviest first,
    ties by id, float64 masses over the row's float64 total), min-p's, one normalization."""
    z_max = z.max(axis=1)
    for peak in z_max.tolist():
        check_scaled(peak, sp)
    weights = np.exp(z - z_max[:, None])
    if sp.top_p < 1.0:
        total = weights.sum(axis=1, dtype=np.float64)
        rows, order = np.arange(len(z))[:, None], np.argsort(-weights, axis=1, kind="stable")
        heaviest = weights[rows, order]
        before = np.zeros(heaviest.shape)
        np.cumsum(heaviest[:, :-1], axis=1, dtype=np.float64, out=before[:, 1:])
        keep = np.empty(weights.shape, dtype=bool)
        keep[rows, order] = before < sp.top_p * total[:, None]
        weights = weights * keep
    if sp.min_p > 0.0:
        floor = sp.min_p * weights.max(axis=1, keepdims=True)
        weights = np.where(weights >= floor, weights, 0.0)
    return (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)


def logits_maxes(
    logits: np.ndarray, sp: SamplingParams, seed: int, position: int
) -> np.ndarray | None:
    """[n] row i's token_dist(...).gumbel_max(seed, position + i), every row at once: under
    top-k the rows' top k (top_k_rows), under min-p alone min_p_rows, under temperature alone
    one pass over the rows (gumbel_max_rows); -1 each for temperature alone on a small
    vocabulary (each row races its own); None otherwise (the supports race at once)."""
    width = logits.shape[-1]
    if sp.host_only:
        return None
    if 0 < sp.top_k <= TOP_K_ROWS and sp.top_k < width:  # each support k tokens or fewer
        rows = np.asarray(logits, dtype=np.float32)
        ids, z = zip(*top_k_rows(rows, sp.top_k, np.float32(sp.temperature)))
        return top_k_rows_of(np.stack(ids), np.stack(z), sp).gumbel_maxes(seed, position)
    if sp.top_k == 0 and sp.top_p >= 1.0 and sp.min_p > 0.0 and width >= RACE_FRONT_MIN:
        return min_p_rows(np.asarray(logits, dtype=np.float32), sp, seed, position)
    if not keeps_row(sp, width):
        return None
    if width < RACE_FRONT_MIN:
        return np.full(len(logits), -1, dtype=np.int64)
    return gumbel_max_rows(logits, sp, seed, position)


# the largest top-k whose rows logits_maxes races at once (their supports race whole)
TOP_K_ROWS = 1024

# blocks past which a row of gumbel_max_rows runs its own race (holders first): below, the
# tokens of every passing block are weighed at once and only those that can reach hashed
BATCH_BLOCKS = 256


def gumbel_max_rows(logits: np.ndarray, sp: SamplingParams, seed: int, position: int) -> np.ndarray:
    """[n] each row's Gumbel-max token under temperature alone at positions position + i:
    dense_race_front's first round, batched, so that a verify step pays numpy's per-call cost
    once, not once a row (a k = 4 step made ~60 calls a row). A row whose race needs more
    (a flat row's holders first, a reach that must rise) runs its own race."""
    rows = np.asarray(logits, dtype=np.float32)
    n = len(rows)
    temperature = np.float32(sp.temperature)
    block_max = block_maxima(rows)  # [n, B]
    with np.errstate(over="ignore"):  # an overflow is refused just below
        z_max = block_max.max(axis=1) / temperature
    for z in z_max:
        check_scaled(float(z), sp)
    z64 = z_max.astype(np.float64)
    w_max = scaled_weights(block_max, temperature, z64[:, None])  # each row's block_weights
    token_offsets, block_offsets = row_noise_offsets(seed, position, n)
    e_min = block_min_e(every_block_bits(block_max.shape[1], block_offsets))
    reach_s = FRONT_REACH / w_max.max(axis=1)  # dense_race_front's first reach, places 1
    passing = e_min <= reach_s[:, None] * w_max
    tokens = np.full(n, -1, dtype=np.int64)
    row_of, block = true_at(passing)
    own = np.bincount(row_of, minlength=n) > BATCH_BLOCKS  # flat rows: their own races
    if own.any():
        row_of, block = row_of[~own[row_of]], block[~own[row_of]]
    # a token of a passing block races at most reach_s only if its logit reaches the block's
    # e_min / reach_s in z (widened for rounding): the rest are not weighed
    z = z64[row_of]
    floor = (z + np.log(e_min[row_of, block] / reach_s[row_of]) - z_rounding(z)) * temperature
    row_of, cand, logits = tokens_reaching(rows, row_of, block, floor)
    w = scaled_weights(logits, temperature, z64[row_of])
    races = divide_races(noise_at(cand, token_offsets[row_of], block_offsets[row_of]), w)
    raced, won = row_winners(row_of, cand, races, n)
    sure = widened(races[won]) <= reach_s[raced]  # none can race below the winner
    tokens[raced[sure]] = cand[won[sure]]
    for i in np.flatnonzero(tokens < 0).tolist():  # token_dist's, its block maxima found
        scaled = ScaledRow(rows[i], temperature, float(z_max[i]), block_max[i])
        tokens[i] = TokenDist(None, None, scaled).gumbel_max(seed, position + i)
    return tokens


def min_p_rows(rows: np.ndarray, sp: SamplingParams, seed: int, position: int) -> np.ndarray:
    """[n] each row's Gumbel-max token under min-p alone (top-k and top-p off) at positions
    position + i, token_dist's bit for bit: each row's tokens at min-p's cut found from its
    noise blocks' maxima (min_p_columns) and decided as a device's columns are
    (spare_min_p_supports), their supports raced in one hash call. A row they cannot decide
    (a token at the cut, or a support of RACE_FRONT_MIN tokens or more: a flat row races its
    front first) is its token_dist's."""
    values, ids = min_p_columns(rows, sp)
    decided, sizes, kept_ids, probs = spare_min_p_supports(values, ids, sp)
    tokens = supports_race(kept_ids, probs, sizes, seed, position)
    for i in np.flatnonzero(~decided).tolist():
        tokens[i] = token_dist(rows[i], sp).gumbel_max(seed, position + i)
    return tokens


def min_p_columns(rows: np.ndarray, sp: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """Each row's tokens at or above min-p's cut (min_p_support's, widened) as a device's
    columns (values [n, m + 1] float32, ids), found without a compare over the whole row:
    only the noise blocks whose largest logit reaches the cut are read (one strided max,
    block_maxima). Every token left out lies under the cut, so each row's columns end with
    -inf (spare_min_p_supports' spare). A row of RACE_FRONT_MIN tokens or more at the cut
    is left with its peak alone (undecided: its whole row decides)."""
    n = len(rows)
    block_max = block_maxima(rows)
    z_max = row_peaks(block_max, sp).astype(np.float64)
    cut = (z_max + math.log(sp.min_p) - 1e-3) * float(sp.temperature)
    row_of, block = true_at(block_max >= cut[:, None])
    at, ids, values = tokens_reaching(rows, row_of, block, cut[row_of])
    counts = np.bincount(at, minlength=n)
    counts[counts >= RACE_FRONT_MIN] = 0
    keep = counts[at] > 0
    at, ids, values = at[keep], ids[keep], values[keep]
    place = np.arange(len(at)) - (np.cumsum(counts) - counts)[at]
    columns = np.full((n, int(counts.max()) + 1), -np.inf, dtype=np.float32)
    column_ids = np.zeros(columns.shape, dtype=np.int64)
    columns[at, place], column_ids[at, place] = values, ids
    flat = counts == 0  # the peak alone, at the cut: undecided
    columns[flat] = block_max[flat].max(axis=1, keepdims=True)
    return columns, column_ids


def tokens_reaching(
    rows: np.ndarray, row_of: np.ndarray, block: np.ndarray, floor: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tokens of noise blocks (row_of, block: a row of rows [n, V] and one of its blocks,
    as true_at gives them) whose logit reaches that block's floor: their rows, ids and
    logits, block by block."""
    width = rows.shape[1]
    slots = all_ids(min(NOISE_BLOCK, -(-width // NOISE_STRIDE)))  # those the vocabulary has
    cand = block_tokens(block[:, None], slots)  # [P, slots]
    logits = rows[row_of[:, None], np.minimum(cand, width - 1)]
    pair, slot = true_at((logits >= floor[:, None]) & (cand < width))
    return row_of[pair], cand[pair, slot], logits[pair, slot]


def row_winners(
    row_of: np.ndarray, cand: np.ndarray, races: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The rows of n that race (row_of: each entry's) and each one's winning entry: its
    smallest race, the lowest id (cand) among ties, as argmin over ascending ids gives it."""
    order = np.lexsort((cand, races, row_of))  # by row, race, id: a row's first entry wins
    first = np.searchsorted(row_of[order], np.arange(n + 1))
    raced = np.flatnonzero(first[1:] > first[:-1])
    return raced, order[first[raced]]


def top_k_rows(
    rows: np.ndarray, k: int, temperature: np.float32
) -> list[tuple[np.ndarray, np.ndarray]]:
    """top_k of each row [n, V], upper_set's grid reduced for every row in one call each:
    the same ids and z, bit for bit, as row by row."""
    n_rows, width = rows.shape
    n_cols = width // COLUMN_ROWS
    if n_cols < 4 * k:
        return [top_k(row, k, temperature) for row in rows]
    n = n_cols * COLUMN_ROWS
    grid = rows[:, :n].reshape(n_rows, COLUMN_ROWS, n_cols)
    tail = rows[:, n:] / temperature
    col_max = np.concatenate([down_maxima(rows, grid) / temperature, tail], axis=1)
    at = col_max.shape[1] - k
    t = np.partition(col_max, at, axis=1)[:, at]
    row_of, cols = true_at(col_max[:, :n_cols] >= t[:, None])
    block = grid[row_of, :, cols] / temperature  # [P, COLUMN_ROWS]
    pair, r = true_at(block >= t[row_of][:, None])
    in_row, in_tail = true_at(tail >= t[:, None])
    row_of = np.concatenate([row_of[pair], in_row])
    ids = np.concatenate([r * n_cols + cols[pair], n + in_tail])
    z = np.concatenate([block[pair, r], tail[in_row, in_tail]])
    order = np.lexsort((ids, row_of))
    row_of, ids, z = row_of[order], ids[order], z[order]
    return [kept_top_k(ids[a:b], z[a:b], k) for a, b in row_ranges(row_of, n_rows)]


def gumbel_max_supports(dists: list[TokenDist], seed: int, position: int) -> np.ndarray:
    """[n] each dist's gumbel_max(seed, position + i): the supports smaller than
    RACE_FRONT_MIN raced whole in one hash call for all of them (supports_race), a larger
    one on its own (its front first)."""
    sizes = np.array([d.size if d.size < RACE_FRONT_MIN else 0 for d in dists])
    small = [d for d in dists if d.size < RACE_FRONT_MIN]
    if not small:
        ids, weights = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
    else:
        ids = np.concatenate([d.token_ids() for d in small])
        weights = np.concatenate([d.weights() for d in small])
    tokens = supports_race(ids, weights, sizes, seed, position)
    for i in np.flatnonzero(sizes == 0).tolist():
        tokens[i] = dists[i].gumbel_max(seed, position + i)
    return tokens
