"""A row's distribution and Gumbel-max token from its largest logits alone, as a device hands
them over (runtimes/sampling_head.py, llama.cpp's backend sampler): the same as from the row,
or None where they cannot decide."""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from edgespec.sampling.dist import (
    MIN_P_BAND,
    TOTAL_ROUNDING,
    TokenDist,
    cut_tail,
    scaled_weights,
    sorted_mass,
    top_k_dist,
)
from edgespec.sampling.noise import (
    block_count,
    block_min_e,
    block_of,
    every_block_bits,
    exponential_noise,
    noise_at,
    row_noise_offsets,
)
from edgespec.sampling.params import SamplingParams, check_scaled
from edgespec.sampling.race import FRONT_REACH, divide_races, supports_race, true_at, z_rounding


def row_ranges(row_of: np.ndarray, n: int) -> list[tuple[int, int]]:
    """[n] (start, end) of each row's entries in row_of (ascending row numbers; a row with
    none gets an empty range)."""
    ends = np.searchsorted(row_of, np.arange(1, n + 1)).tolist()
    return list(zip([0, *ends[:-1]], ends))


def candidate_dist(
    values: np.ndarray, ids: np.ndarray, lse: float, n_columns: int, sp: SamplingParams
) -> TokenDist | None:
    """token_dist of a row from its likeliest logits alone, as a sampling head returns them
    (runtimes/sampling_head.py): values [m + 1] in descending order, their columns ids, and
    lse = log(sum(exp(row / temperature))) over all n_columns. None where these cannot
    decide: the last value is a spare that must lie strictly below the others in row /
    temperature (so every column left out is below every one kept), top-k must fit in the
    m, top-p's mass must be reached inside them (nucleus's own rule), min-p's cut must
    fall inside them, and temperature alone can draw any token.

    With top-k on, the result is token_dist's bit for bit: the same k logits in the same
    order. Otherwise the probabilities are exp(z - lse), within float32 rounding of
    token_dist's softmax over the whole row (the same row takes the same way every time, so
    speculative and plain decoding still draw alike)."""
    temperature = np.float32(sp.temperature)
    z = np.divide(values, temperature, dtype=np.float32)  # the host's row / temperature
    m = len(z) - 1
    if not z[m - 1] > z[m]:  # a tie across the boundary (or NaN): the whole row decides
        return None
    order = np.argsort(ids[:m], kind="stable")  # ascending ids, as upper_set gives them
    ids, z = ids[:m][order].astype(np.int64), z[:m][order]
    if 0 < sp.top_k < n_columns:
        if sp.top_k > m:
            return None
        keep = np.sort(np.argsort(-z, kind="stable")[: sp.top_k])  # as top_k() keeps them
        return top_k_dist(ids[keep], z[keep], sp)
    if not sp.cuts_tail or sp.host_only:
        return None  # temperature alone: every token can be drawn
    check_scaled(float(values[0] / temperature), sp)
    probs = np.exp(z - np.float32(lse)).astype(np.float32)
    spare = np.float32(np.exp(np.float32(values[m] / temperature) - np.float32(lse)))
    if sp.top_p < 1.0:
        if not sorted_mass(probs) >= sp.top_p:  # the row's mass is 1 by lse
            return None
    elif not spare < np.float32(sp.min_p) * probs.max():
        return None
    return cut_tail(ids, probs, sp, total=1.0)


def row_peaks(values: np.ndarray, sp: SamplingParams) -> np.ndarray:
    """[n] float32 each row's largest z = logit / temperature, from a device's columns
    (values [n, m + 1], in any order), each refused as token_dist refuses its row's
    (check_scaled)."""
    z_max = np.divide(values.max(axis=1), np.float32(sp.temperature), dtype=np.float32)
    for peak in z_max.tolist():
        check_scaled(peak, sp)
    return z_max


def spare_min_p_dist(values: np.ndarray, ids: np.ndarray, sp: SamplingParams) -> TokenDist | None:
    """token_dist of a row under min-p (top-k and top-p off) from its m + 1 largest logits,
    values in any order, their columns ids (a device's top-k: llama.cpp's backend sampler):
    spare_min_p_supports of the one row. None where it cannot decide."""
    if sp.top_p < 1.0 or sp.top_k:  # top-p's nucleus needs the row's total
        return None
    decided, _, kept_ids, probs = spare_min_p_supports(values[None], ids[None], sp)
    return TokenDist(kept_ids, probs) if decided[0] else None


def spare_min_p_supports(
    values: np.ndarray, ids: np.ndarray, sp: SamplingParams
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """min-p's support of each row (top-k and top-p off) from its m + 1 largest logits,
    values [n, m + 1] in any order, their columns ids: min_p_support's tokens, those whose
    logit reaches min-p's cut (widened), are found among the columns where the smallest of
    them (the spare: no token left out lies above it) lies below the cut, with token_dist's
    probabilities bit for bit. No ordering: one compare over the columns, as over the row.
    Returns decided [n] (False where the spare reaches the cut, or a token lies within
    MIN_P_BAND of it: the dense row decides there), and the decided rows' supports end to
    end: sizes [n] (0 where not decided), ids (ascending in each row) and probabilities."""
    temperature, n = np.float32(sp.temperature), values.shape[0]
    z_max = row_peaks(values, sp)
    low = (z_max.astype(np.float64) + math.log(sp.min_p) - 1e-3) * float(temperature)
    row_of, j = true_at(values >= low[:, None])
    e = np.exp(np.divide(values[row_of, j], temperature, dtype=np.float32) - z_max[row_of])
    near = np.abs(e - np.float32(sp.min_p)) <= MIN_P_BAND * sp.min_p
    decided = (values.min(axis=1) < low) & (np.bincount(row_of[near], minlength=n) == 0)
    keep = (e >= np.float32(sp.min_p)) & decided[row_of]
    row_of, kept_ids, weights = row_of[keep], ids[row_of[keep], j[keep]].astype(np.int64), e[keep]
    order = np.lexsort((kept_ids, row_of))  # ascending ids in each row, as the row's compare
    row_of, kept_ids, weights = row_of[order], kept_ids[order], weights[order]
    # kept_dist's normalization (its min-p cut keeps them all: the peak weighs exp(0) = 1),
    # summed row by row: a float32 sum's rounding follows its length
    sizes = np.bincount(row_of, minlength=n)
    totals = [weights[a:b].sum() for a, b in row_ranges(row_of, n)]
    probs = weights / np.repeat(np.array(totals, dtype=np.float32), sizes)
    return decided, sizes, kept_ids, probs


def spare_gumbel_maxes(
    values: np.ndarray,
    ids: np.ndarray,
    n_columns: int,
    sp: SamplingParams,
    seed: int,
    position: int,
) -> np.ndarray:
    """[n] each row's Gumbel-max token under temperature alone from its m + 1 largest logits
    (values [n, m + 1] in any order, of n_columns, their columns ids), -1 where they cannot
    decide. The columns race as the row's tokens do (scaled_weights, noise_at), those that
    can race below a reach first (FRONT_REACH races of the likeliest, raised where none
    does: gumbel_max_rows' rounds), each weighed and hashed only where its noise block's
    smallest noise allows. A token left out weighs at most the smallest column (the spare),
    so races at least the smallest noise of any block over the spare's weight: a winner
    below that is the row's (ties: the lowest id)."""
    temperature, n = np.float32(sp.temperature), values.shape[0]
    z_max = row_peaks(values, sp).astype(np.float64)
    token_offsets, block_offsets = row_noise_offsets(seed, position, n)
    # every block's hash, but the smallest noise (the largest uniform) of the row's alone, and
    # a block's only where a candidate asks: the same numbers as block_noise_at's
    bits = every_block_bits(block_count(n_columns), block_offsets)  # [n, blocks]
    lowest = block_min_e(bits.max(axis=1))  # [n] the smallest noise anywhere in the row
    best, winner = np.full(n, np.inf), np.full(n, n_columns, dtype=np.int64)
    reach, hashed_to = np.full(n, FRONT_REACH), np.zeros(n)  # hashed: e_min <= hashed_to w
    rows = np.arange(n)
    while len(rows):
        # a column races below reach only if its weight reaches lowest / reach: one compare
        # in logits, widened for z's rounding
        floor = z_max[rows] + np.log(lowest[rows] / reach[rows]) - z_rounding(z_max[rows])
        low = floor.astype(np.float32) * temperature
        at, j = true_at((values if len(rows) == n else values[rows]) >= low[:, None])
        row_of = rows[at]
        cand = ids[row_of, j].astype(np.int64)
        w = scaled_weights(values[row_of, j], temperature, z_max[row_of])
        bound = block_min_e(bits[row_of, block_of(cand)])
        near = (bound <= reach[row_of] * w) & (bound > hashed_to[row_of] * w)
        row_of, cand, w = row_of[near], cand[near], w[near]
        races = divide_races(noise_at(cand, token_offsets[row_of], block_offsets[row_of]), w)
        before = best.copy()
        np.minimum.at(best, row_of, races)
        winner[best < before] = n_columns  # a new best race: its own tokens only
        at_best = races == best[row_of]
        np.minimum.at(winner, row_of[at_best], cand[at_best])  # ties: the lowest id
        # where the best race lies above the reach, a token not hashed may beat it
        rows = rows[best[rows] > reach[rows]]
        hashed_to[rows] = reach[rows]
        reach[rows] = np.minimum(best[rows], 64.0 * reach[rows])
    outside = divide_races(lowest, scaled_weights(values.min(axis=1), temperature, z_max))
    return np.where(best < outside, winner, -1)


# relative: the spare's weight widened for the float32 exp's rounding, so that no token left
# out (its logit at most the spare's) can weigh more
SPARE_ROUNDING = 2.0**-20

# relative: a Gumbel race won by this margin keeps its winner whatever the nucleus's sum (each
# probability is its weight over the sum, rounded to float32: 2^-24 each)
RACE_MARGIN = 2.0**-20

# weights from which SpareNuclei orders a row's columns, the first that holds its nucleus (so
# few are sorted; how often each does: docs/decisions.md)
NUCLEUS_FLOORS = (2.0**-10, 2.0**-20)


class SpareNuclei:
    """Top-p's nucleus of each row (top-k off) from its m + 1 largest logits, values
    [n, m + 1] in any order, their columns ids (a device's top-k: llama.cpp's backend
    sampler), as token_dist finds it, bit for bit. The row's total lies between the
    columns' float64 sum and that plus the n_columns - m - 1 tokens left out, each weighing
    at most the smallest column (the spare); the heaviest-first masses before each column
    are the row's own (a float64 cumsum in the same order), so the nucleus is decided where
    no mass lies between top-p of the two ends. Where one does, the Gumbel race can still
    be: the winner among the tokens always kept, ahead of every token that may be
    (gumbel_maxes). Only the columns at or above a row's floor (NUCLEUS_FLOORS) are put in
    order, all of them where a nucleus may reach past those."""

    ids: np.ndarray  # [n, width + 1] each row's ordered columns (lay_out)
    w: np.ndarray  # [n, width + 1] float32 their exp(z - max z), 0 after them

    def __init__(self, values: np.ndarray, ids: np.ndarray, n_columns: int, sp: SamplingParams):
        temperature, columns = np.float32(sp.temperature), values.shape[1]
        z_max = row_peaks(values, sp)
        w = np.divide(values, temperature, dtype=np.float32)  # in place from here: 3 passes
        np.exp(np.subtract(w, z_max[:, None], out=w), out=w)  # over [n, 4097], one buffer
        spare = w.min(axis=1).astype(np.float64) * (1.0 + SPARE_ROUNDING)
        total = w.sum(axis=1, dtype=np.float64)
        self.low = sp.top_p * total * (1.0 - TOTAL_ROUNDING)
        self.high = sp.top_p * (total + (n_columns - columns) * spare) * (1.0 + TOTAL_ROUNDING)
        self.sp = sp
        above = self.above_floors(w)
        if above is None:
            order = np.argsort(-values, axis=1, kind="stable")
            self.lay_out(np.take_along_axis(ids, order, 1), np.take_along_axis(w, order, 1))
        else:
            self.order_heaviest(values, ids, w, *above)
        self.count_nuclei()
        self.check_usable(spare)

    def above_floors(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Each row's columns at or above its floor (rows, columns, as true_at gives them): the
        largest of NUCLEUS_FLOORS whose columns weigh top-p of the most the row can, widened
        for a float64 sum's rounding (so the mass before the first column under it, summed
        heaviest first, reaches the nucleus's edge too); None where a row has none (all its
        columns are ordered)."""
        n = len(w)
        floors, rows = np.zeros(n, dtype=np.float32), np.arange(n)
        for floor in NUCLEUS_FLOORS:  # the next floor only for the rows the last one failed
            part = w if len(rows) == n else w[rows]
            at, j = true_at(part >= np.float32(floor))
            heavy = np.bincount(at, weights=part[at, j], minlength=len(rows))
            holds = heavy >= self.high[rows] * (1.0 + TOTAL_ROUNDING)
            if len(rows) == n and holds.all():  # the common case: found at the first floor
                return at, j
            floors[rows[holds]] = floor
            rows = rows[~holds]
            if not len(rows):
                return true_at(w >= floors[:, None])
        return None

    def order_heaviest(
        self, values: np.ndarray, ids: np.ndarray, w: np.ndarray, row_of: np.ndarray, j: np.ndarray
    ) -> None:
        """Each row's columns at or above its floor (row_of, j), heaviest first (ties by
        column, as a stable argsort), laid out (lay_out). A weight floor is a logit floor (exp
        is monotone), so ties are all in or all out: the order is a prefix of the whole row's,
        and every column left out is lighter than every one kept."""
        order = np.lexsort((j, -values[row_of, j], row_of))
        row_of, j = row_of[order], j[order]
        self.lay_out(ids[row_of, j], w[row_of, j], row_of)

    def lay_out(self, ids: np.ndarray, w: np.ndarray, row_of: np.ndarray | None = None) -> None:
        """ids and w [n, width + 1]: each row's ordered columns (end to end in ids and w, the
        row of each in row_of, ascending; None: all, ids and w [n, width] already), then
        columns weighing 0, at least one: the token after a row's last ordered one is lighter
        than all of them (a floor's) or left out (all ordered)."""
        n = len(self.high)
        if row_of is None:
            row_of = np.repeat(np.arange(n), w.shape[1])
            ids, w = ids.reshape(-1), w.reshape(-1)
        self.sizes = sizes = np.bincount(row_of, minlength=n)
        place = np.arange(len(row_of)) - (np.cumsum(sizes) - sizes)[row_of]
        self.ids = np.zeros((n, int(sizes.max()) + 1), dtype=ids.dtype)
        self.w = np.zeros(self.ids.shape, dtype=np.float32)
        self.ids[row_of, place] = ids
        self.w[row_of, place] = w

    def count_nuclei(self) -> None:
        """least and most from the ordered columns (most at most their count where they are
        a floor's: its first column left out is not kept)."""
        n, width = self.w.shape
        before = np.zeros((n, width))
        np.cumsum(self.w[:, :-1], axis=1, dtype=np.float64, out=before[:, 1:])
        self.least = (before < self.low[:, None]).sum(axis=1)  # kept whatever the total
        self.most = (before < self.high[:, None]).sum(axis=1)  # kept for some total

    def check_usable(self, spare: np.ndarray) -> None:
        """usable [n]: the order is the row's heaviest first (the weights never rise along
        the prefix: monotone roundings), the cut splits no tie (where ties go by id: the
        token after a floor's columns is lighter), and the nucleus's last token outweighs
        the spare, so every token left out (where all columns are ordered, a nucleus that
        reaches the spare is not usable)."""
        rows, last = np.arange(len(self.w)), np.minimum(self.most, self.sizes)
        reached = int(last.max()) + 1
        rises = self.w[:, 1:reached] > self.w[:, : reached - 1]
        self.usable = ~(rises & (np.arange(reached - 1) < last[:, None])).any(axis=1)
        self.usable &= self.w[rows, last] < self.w[rows, last - 1]
        self.usable &= self.w[rows, last - 1] > spare

    def dist(self, i: int) -> TokenDist | None:
        """Row i's token_dist, None where its nucleus is not decided (its part of supports)."""
        sizes, ids, probs = self.supports
        if not sizes[i]:
            return None
        end = int(sizes[: i + 1].sum())
        return TokenDist(ids[end - sizes[i] : end], probs[end - sizes[i] : end])

    @cached_property
    def supports(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every decided row's distribution at once, each token_dist's bit for bit
        (kept_dist's cut and normalization, a row's float32 sum over its own ids ascending):
        sizes [n] (0 where not decided), and the rows' ids (ascending in each) and
        probabilities end to end."""
        n, width = self.w.shape
        decided = self.usable & (self.least == self.most)
        row_of, j = true_at((np.arange(width) < self.most[:, None]) & decided[:, None])
        ids, w = self.ids[row_of, j].astype(np.int64), self.w[row_of, j]
        order = np.lexsort((ids, row_of))
        row_of, ids, w = row_of[order], ids[order], w[order]
        ranges = row_ranges(row_of, n)
        if self.sp.min_p > 0.0:  # kept_dist's min-p cut, at each row's peak
            peaks = np.array([w[a:b].max() if b > a else 0.0 for a, b in ranges], np.float32)
            w = np.where(w >= np.float32(self.sp.min_p) * peaks[row_of], w, np.float32(0.0))
        totals = np.array([w[a:b].sum() for a, b in ranges], dtype=np.float32)
        probs = (w / totals[row_of]).astype(np.float32)
        kept = probs > 0  # cut tokens and exp underflows leave the support
        return np.bincount(row_of[kept], minlength=n), ids[kept], probs[kept]

    def gumbel_maxes(self, seed: int, position: int) -> np.ndarray:
        """[n] each row's Gumbel-max token, -1 where it is not decided: a decided nucleus
        races as its TokenDist does; an undecided one where the winner among the tokens
        always kept beats every other that may be kept by RACE_MARGIN."""
        sizes, ids, probs = self.supports
        tokens = supports_race(ids, probs, sizes, seed, position)
        for i in np.flatnonzero((sizes == 0) & self.usable).tolist():
            tokens[i] = self.margin_race(i, seed, position + i)
        return tokens

    def margin_race(self, i: int, seed: int, position: int) -> int:
        """Row i's token where its nucleus's edge is not decided (-1 where the race is not)."""
        c, least = int(self.most[i]), int(self.least[i])
        w = self.w[i, :c].astype(np.float64)
        if self.sp.min_p > 0.0:  # min-p cuts the nucleus's light tokens whatever its sum
            w[self.w[i, :c] < np.float32(self.sp.min_p)] = 0.0
        races = divide_races(exponential_noise(seed, position, self.ids[i, :c].astype(np.int64)), w)
        j = int(np.argmin(races))
        rest = np.delete(races, j)
        # kept whatever the sum: heavier than the least-kept edge (a tie there goes by id)
        kept = self.w[i, j] > self.w[i, least]
        won = kept and (not len(rest) or rest.min() > races[j] * (1.0 + RACE_MARGIN))
        return int(self.ids[i, j]) if won else -1
