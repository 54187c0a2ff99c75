"""Sampling parameters and the one logits -> probabilities transform that target and draft share.

The order of the filters follows llama.cpp's default sampler chain: temperature scales the
logits, then top-k, top-p and min-p cut the tail of the resulting distribution, and what is
left is renormalized. Greedy (temperature 0) never comes through here: it is an argmax.
The work after one or two passes over the vocabulary runs on the tokens that can be drawn
(TokenDist); tests/sampling_reference.py keeps the dense transform it must agree with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from edgespec.sampling.noise import all_ids, block_maxima
from edgespec.sampling.params import SamplingParams, check_scaled
from edgespec.sampling.race import COLUMN_ROWS, gumbel_max, gumbel_max_margin, upper_set, z_rounding


def keeps_row(sp: SamplingParams, n_columns: int) -> bool:
    """Whether token_dist keeps the row itself (temperature alone: ScaledRow), not a support
    drawn from it: a row read in a back-end's buffer is then copied first (row_dists)."""
    return not 0 < sp.top_k < n_columns and not sp.cuts_tail


@dataclass(frozen=True)
class ScaledRow:
    """A dense row under temperature alone, kept as its logits: z = row / temperature.

    A Gumbel race needs only the weights exp(z - max z) of the tokens it races, which rank
    and divide as the probabilities do; the softmax over the whole row (an exp, a sum and a
    divide over 152k columns) is computed only where something asks for probabilities."""

    row: np.ndarray  # [V] float32 logits
    temperature: np.float32
    z_max: float  # max(row) / temperature: the row's largest z, checked finite
    block_max: np.ndarray  # block_maxima(row): what bounds each noise block's race

    def weights(self, j: np.ndarray | None = None) -> np.ndarray:
        """[m] float64 exp(z - max z) of entries j (None: all): the race's unnormalized p."""
        return self.weights_of(self.row if j is None else self.row[j])

    def block_weights(self) -> np.ndarray:
        """[blocks] float64 each noise block's largest weight (block_maxima), computed as a
        token's is: no token of the block weighs more."""
        return self.weights_of(self.block_max)

    def weights_of(self, logits: np.ndarray) -> np.ndarray:
        """exp(z - max z) of these logits (scaled_weights)."""
        return scaled_weights(logits, self.temperature, self.z_max)

    def probs(self) -> np.ndarray:
        """softmax(z) over the whole row: [V] float32."""
        return dense_softmax(self.row, self.temperature, self.z_max)


def scaled_weights(
    logits: np.ndarray, temperature: np.float32, z_max: float | np.ndarray
) -> np.ndarray:
    """float64 exp(z - z_max), z = logit / temperature in float32: a race's unnormalized p
    under temperature alone (z_max one row's, or one per logit: a step's rows at once)."""
    w = np.divide(logits, temperature).astype(np.float64)
    w -= z_max
    return np.exp(w, out=w)


class TokenDist:
    """One position's distribution over the vocabulary, stored on its support.

    ids None: one entry per token id (dense). Otherwise entry j is token ids[j] (ascending)
    and every other token has probability exactly 0. Kept as probabilities (probs, each > 0
    on a sparse support) or, for temperature alone, as the scaled row (ScaledRow), whose
    probabilities are computed when first asked for: a Gumbel race (gumbel_max) divides by
    weights(), the probabilities or the scaled row's exp(z - max z).
    """

    __slots__ = ("ids", "scaled", "_probs")

    def __init__(
        self, ids: np.ndarray | None, probs: np.ndarray | None, scaled: ScaledRow | None = None
    ) -> None:
        assert (probs is None) != (scaled is None), "probabilities or a scaled row, one"
        self.ids = ids  # [m] int64 ascending, or None
        self.scaled = scaled
        self._probs = probs  # [m] or [V] float32

    @property
    def probs(self) -> np.ndarray:
        if self._probs is None:
            assert self.scaled is not None
            self._probs = self.scaled.probs()
        return self._probs

    @property
    def size(self) -> int:
        """Entries of the support (of the row where dense)."""
        if self.scaled is not None:
            return len(self.scaled.row)
        assert self._probs is not None
        return len(self._probs)

    def weights(self, j: np.ndarray | None = None) -> np.ndarray:
        """What a Gumbel race divides its noise by, for entries j (None: all): probs, or the
        scaled row's exp(z - max z) (the same ranking and ratios, unnormalized)."""
        if self.scaled is not None:
            return self.scaled.weights(j)
        return self.probs if j is None else self.probs[j]

    def prob(self, token: int) -> float:
        if self.ids is None:
            return float(self.probs[token])
        j = int(np.searchsorted(self.ids, token))
        return float(self.probs[j]) if j < len(self.ids) and self.ids[j] == token else 0.0

    def dense(self, n_vocab: int) -> np.ndarray:
        """[V] float32, zeros off the support (and past a shorter dense row: a draft without
        the target's padding rows)."""
        if self.ids is None and self.size == n_vocab:
            return self.probs
        out = np.zeros(n_vocab, dtype=np.float32)
        if self.ids is None:
            out[: len(self.probs)] = self.probs
        else:
            out[self.ids] = self.probs
        return out

    def on_ids(self, columns: np.ndarray | None) -> TokenDist:
        """This distribution over logits columns as one over the token ids columns[j]
        (ascending; a draft that keeps some ids: Runtime.logit_ids); None: the same."""
        if columns is None:
            return self
        ids = columns if self.ids is None else columns[self.ids]
        return TokenDist(ids, self._probs, self.scaled)

    def sample(self, rng: np.random.Generator) -> int:
        """One token id, one uniform: sample() over the stored probabilities. On a support of
        fewer than 4,096 tokens that is the id-order inverse CDF, the token the reference
        sampler draws from dense(V) with the same uniform."""
        j = sample(self.probs, rng)
        return j if self.ids is None else int(self.ids[j])

    def gumbel_max(self, seed: int, position: int) -> int:
        """The token at `position` of the request with this seed (race.gumbel_max)."""
        return gumbel_max(self, seed, position)

    def gumbel_max_margin(self, seed: int, position: int) -> tuple[int, float]:
        """gumbel_max's token and how far it won (race.gumbel_max_margin)."""
        return gumbel_max_margin(self, seed, position)

    def token_at(self, j: int) -> int:
        return j if self.ids is None else int(self.ids[j])

    def token_ids(self) -> np.ndarray:
        """The token id of each entry of the support (all_ids where dense)."""
        return self.ids if self.ids is not None else all_ids(self.size)


def token_dist(logits: np.ndarray, sp: SamplingParams) -> TokenDist:
    """[V] float logits -> the distribution a token is drawn from: the transform that target
    (p) and draft (q) share.

    One pass over the vocabulary when top-k is on (then everything runs on about k
    candidates); temperature alone one max here (ScaledRow: a Gumbel race reads a few
    thousand of its columns; probabilities cost one exp, one sum and one divide over it);
    min-p a max and one compare (min_p_support); top-p a max and one compare where the
    tokens near the peak decide its cut (top_p_head), else the row's exp and sum.
    Among tokens tied at the k-th largest value, top-k keeps the lowest ids.
    """
    if sp.greedy:
        raise ValueError("greedy decoding takes the argmax; it has no probability vector")
    row = np.asarray(logits, dtype=np.float32)
    temperature = np.float32(sp.temperature)
    if 0 < sp.top_k < len(row):
        return top_k_dist(*top_k(row, sp.top_k, temperature), sp)
    alone = keeps_row(sp, len(row))
    block_max = block_maxima(row) if alone else None  # its race's bounds; their max the row's
    with np.errstate(over="ignore"):  # an overflow is refused just below
        peak = row.max() if block_max is None else block_max.max()
        z_max = np.float32(peak) / temperature  # max(row / t): division is monotone
    check_scaled(float(z_max), sp)
    if sp.typical_p < 1.0:  # its cut needs the whole row's entropy
        return cut_tail(all_ids(len(row)), dense_exp(row, temperature, float(z_max)), sp)
    if sp.top_p < 1.0:
        found = top_p_head(row, temperature, z_max, sp.top_p)
        if found is None:
            found = dense_top_p(row, temperature, z_max, sp.top_p)
        return kept_dist(*found, sp)
    if sp.min_p > 0.0:
        found = min_p_support(row, temperature, z_max, sp.min_p)
        if found is not None:
            return cut_tail(*found, sp)
        probs = dense_softmax(row, temperature, float(z_max))  # a token at the cut: the
        ids = np.flatnonzero(probs >= np.float32(sp.min_p) * probs.max())  # dense row decides
    else:  # temperature alone: kept as the row
        assert block_max is not None
        return TokenDist(None, None, ScaledRow(row, temperature, float(z_max), block_max))
    return kept_dist(ids, probs[ids], sp)


MIN_P_BAND = 2.0**-16  # relative: an exp(z - max z) this near min-p is left to the dense row


def min_p_support(
    row: np.ndarray, temperature: np.float32, z_max: np.float32, min_p: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """min-p's support (ids ascending) and its tokens' exp(z - max z), from the logits: p_j >=
    min_p p_max is exp(z_j - max z) >= min_p, the softmax's sum cancelling, so one compare
    over the row finds the tokens and the exp runs on them alone (cut_tail renormalizes).
    None where a token lies within MIN_P_BAND of the cut, where the dense softmax's
    roundings decide (token_dist's dense path)."""
    # z_j - z_max >= log(min_p), widened: row / temperature rounds both ways
    low = (float(z_max) + math.log(min_p) - 1e-3) * float(temperature)
    ids = np.flatnonzero(row >= low)
    e = np.exp(np.divide(row[ids], temperature, dtype=np.float32) - z_max)
    if np.any(np.abs(e - np.float32(min_p)) <= MIN_P_BAND * min_p):
        return None
    keep = e >= np.float32(min_p)
    return ids[keep], e[keep]


def cut_tail(
    ids: np.ndarray, weights: np.ndarray, sp: SamplingParams, total: float | None = None
) -> TokenDist:
    """The last of token_dist: top-p and min-p cut the candidates (ids ascending, weights
    exp(z - max z) or probabilities: top-p's masses are weights / total, total the whole
    row's float64 sum, None: the candidates' own), what is left is normalized once, and
    tokens at probability 0 leave the support. Typical's cut comes first, over the candidates
    (top-k's, or the whole row), and top-p then reads their own total."""
    if sp.typical_p < 1.0:
        weights, total = cut_typical(weights, sp.typical_p), None
    if sp.top_p < 1.0:
        row_total = float(weights.sum(dtype=np.float64)) if total is None else total
        weights = cut_top_p(weights, sp.top_p, row_total)
    return kept_dist(ids, weights, sp)


def kept_dist(ids: np.ndarray, weights: np.ndarray, sp: SamplingParams) -> TokenDist:
    """The distribution over the tokens top-p kept (ids ascending, their weights; a cut token
    weighs 0): min-p's cut, one normalization, and the tokens at 0 left out."""
    if sp.min_p > 0.0:
        weights = np.where(weights >= sp.min_p * weights.max(), weights, 0.0)
    probs = (weights / weights.sum()).astype(np.float32)
    support = probs > 0  # cut tokens and exp underflows leave the support
    return TokenDist(ids[support], probs[support])


def dense_softmax(row: np.ndarray, temperature: np.float32, z_max: float) -> np.ndarray:
    """softmax(row / temperature) over the whole vocabulary in one buffer: [V] float32;
    z_max = max(row) / temperature, checked finite (check_scaled)."""
    e = dense_exp(row, temperature, z_max)
    return np.divide(e, e.sum(), out=e)


def dense_exp(row: np.ndarray, temperature: np.float32, z_max: float) -> np.ndarray:
    """exp(row / temperature - z_max) over the whole vocabulary in one buffer: [V] float32,
    dense_softmax's before its divide by their sum."""
    z = np.divide(row, temperature)
    np.subtract(z, np.float32(z_max), out=z)
    return np.exp(z, out=z)


def top_k(row: np.ndarray, k: int, temperature: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The k tokens with the largest z = row / temperature: (ids ascending [k], their z [k])."""
    return kept_top_k(*upper_set(row, k, temperature), k)


def kept_top_k(ids: np.ndarray, z: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k of upper_set's (ids, z) with the largest z, ids ascending."""
    keep = np.sort(np.argsort(-z, kind="stable")[:k])  # stable: lowest ids win ties
    return ids[keep], z[keep]


def top_k_dist(ids: np.ndarray, z: np.ndarray, sp: SamplingParams) -> TokenDist:
    """token_dist of a row from its top k (ids ascending, z = logit / temperature): their
    weights exp(z - max z) are the dense row's, bit for bit."""
    z_max = z.max()
    check_scaled(float(z_max), sp)
    return cut_tail(ids, np.exp(z - z_max), sp)


def sorted_mass(weights: np.ndarray) -> float:
    """The float64 sum of weights added largest first, as cut_top_p adds them."""
    return float(np.cumsum(np.sort(weights)[::-1], dtype=np.float64)[-1])


def mass_before(sorted_weights: np.ndarray) -> np.ndarray:
    """[m] float64 each token's mass before it: the sum of the weights ahead of it, added in
    order (sequentially, so that a prefix's sums are the whole row's, bit for bit)."""
    before = np.zeros(len(sorted_weights))
    np.cumsum(sorted_weights[:-1], dtype=np.float64, out=before[1:])
    return before


def cut_top_p(weights: np.ndarray, top_p: float, total: float) -> np.ndarray:
    """Top-p's cut of one row's candidates [m] (weights, any scale; total the whole row's
    float64 sum): the smallest set of heaviest tokens whose mass reaches top_p, each kept
    while the mass before it is < top_p * total (float64: a float32 running sum over 100k
    tokens drifts by more than one token's mass). Ties go to the lowest ids. The cut
    tokens' weights become 0."""
    order = np.argsort(-weights, kind="stable")
    keep = np.empty(len(weights), dtype=bool)
    keep[order] = mass_before(weights[order]) < top_p * total  # the first token is always kept
    return weights * keep


def cut_typical(weights: np.ndarray, typical_p: float) -> np.ndarray:
    """Locally typical sampling's cut (Meister et al., 2022) of one row's candidates [m]: the
    tokens whose surprise -log p lies nearest the entropy, nearest first (ties by id), each
    kept while the float64 mass before it is < typical_p. The cut tokens' weights become 0."""
    p = weights / weights.sum(dtype=np.float64)
    with np.errstate(divide="ignore"):
        surprise = -np.log(p)  # inf for a token at 0: last, and it weighs nothing
    entropy = float(np.sum(p[p > 0] * surprise[p > 0]))
    order = np.argsort(np.abs(surprise - entropy), kind="stable")
    keep = np.empty(len(p), dtype=bool)
    keep[order] = mass_before(p[order]) < typical_p  # the nearest is always kept
    return weights * keep


def heaviest(weights: np.ndarray, m: int) -> np.ndarray:
    """Indices of the m heaviest entries of weights [n] and of any tied with the m-th,
    heaviest first (ties by index): a prefix of the whole array's order. Found by one grid
    pass where the array has columns enough (upper_set), else by a partition, or all of
    them where m is half of them or more."""
    n = len(weights)
    if 2 * m >= n:  # a partition would leave little out
        return heaviest_first(weights, np.arange(n))
    if 4 * m <= n // COLUMN_ROWS:
        top = upper_set(weights, m, np.float32(1.0))[0]
    else:
        top = np.flatnonzero(weights >= np.partition(weights, n - m)[n - m])
    return heaviest_first(weights, top)


def heaviest_first(weights: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Indices at (ascending) sorted by weights[at] descending, ties by index."""
    return at[np.argsort(-np.asarray(weights[at], dtype=np.float32), kind="stable")]


def nucleus(weights: np.ndarray, low: float, high: float, left_out: float) -> np.ndarray | None:
    """Indices (ascending) of the tokens top-p keeps among a row's candidates [n] (weights in
    id order), where the cut is the same at every limit from low to high (top_p times the
    bounds of the row's float64 total) and each kept token outweighs left_out, the most a
    token not among them can weigh (0: there is none); else None (never where low == high
    and none is left out). The heaviest grow (64, 512, ...) until their mass reaches high:
    no token after them is kept."""
    m = 64
    while True:
        top = heaviest(weights, m)
        before = mass_before(weights[top])
        mass = before[-1] + weights[top[-1]]  # the mass before the next token
        if mass >= high or len(top) == len(weights):
            break
        last = float(weights[top[-1]])  # each token after them weighs at most this much:
        m = max(8 * m, len(top) + int((high - mass) / last)) if last > 0.0 else len(weights)
    kept = int(np.count_nonzero(before < high))
    if kept != np.count_nonzero(before < low):
        return None  # the total's bounds straddle a token
    if left_out > 0.0:  # tokens outside the candidates: none may tie with or follow a kept one
        if not weights[top[kept - 1]] > left_out:
            return None  # a kept token ties with one left out
        if kept == len(top) and not mass >= high:
            return None  # the nucleus may reach past the candidates
    keep = np.zeros(len(weights), dtype=bool)
    keep[top[:kept]] = True
    return np.flatnonzero(keep)


TOP_P_HEAD_NATS = 20.0  # top_p_head's tokens: those within this of the row's peak (in z)

TOP_P_HEAD_MAX = 32_768  # a head larger than this: the whole row decides (dense_top_p)

TOTAL_ROUNDING = 1e-9  # relative: any float64 sum of a row's weights lies this near the true one


def top_p_head(
    row: np.ndarray, temperature: np.float32, z_max: np.float32, top_p: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Top-p's nucleus (ids ascending, weights exp(z - max z)) found from the tokens within
    TOP_P_HEAD_NATS of the peak: one compare over the row and the exp on those alone. Each
    token left out weighs under exp(-TOP_P_HEAD_NATS), so the row's total lies between the
    head's sum and that plus their count times it; where the cut is the same at both ends it
    is the whole row's, bit for bit. Where it is not, the row's own total (its exp and sum)
    decides among the same tokens. None where the nucleus may reach past them, ties with one
    left out, or the head is large: the whole row decides (dense_top_p)."""
    slack = z_rounding(float(z_max))
    if slack > 1.0:  # logits near float32's end: z's rounding dwarfs the head's bound
        return None
    ids = np.flatnonzero(row >= (float(z_max) - TOP_P_HEAD_NATS) * float(temperature))
    if len(ids) > TOP_P_HEAD_MAX:  # a flat row: gathering the head costs more than the row
        return None
    w = np.exp(np.divide(row[ids], temperature) - z_max)  # dense_exp's, bit for bit
    left_out = math.exp(slack - TOP_P_HEAD_NATS)  # the most a token left out can weigh
    head = float(w.sum(dtype=np.float64))
    high = top_p * (head + (len(row) - len(ids)) * left_out) * (1.0 + TOTAL_ROUNDING)
    if high <= 1.0:  # the peak (weight 1) reaches top-p of any total: nucleus's answer, unsorted
        peak = int(np.argmax(w))  # ties: the lowest id (docs/decisions.md: its cost)
        return ids[peak : peak + 1], w[peak : peak + 1]
    kept = nucleus(w, top_p * head * (1.0 - TOTAL_ROUNDING), high, left_out)
    if kept is None and len(ids) < len(row):  # the tail's mass may move the cut
        limit = top_p * float(dense_exp(row, temperature, float(z_max)).sum(dtype=np.float64))
        kept = nucleus(w, limit, limit, left_out)
    return None if kept is None else (ids[kept], w[kept])


def dense_top_p(
    row: np.ndarray, temperature: np.float32, z_max: np.float32, top_p: float
) -> tuple[np.ndarray, np.ndarray]:
    """Top-p's nucleus (ids ascending, weights) from the whole row's exp and float64 sum."""
    weights = dense_exp(row, temperature, float(z_max))
    total = float(weights.sum(dtype=np.float64))
    kept = nucleus(weights, top_p * total, top_p * total, 0.0)
    assert kept is not None  # one limit and nothing left out: the cut is decided
    return kept, weights[kept]


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a [V] probability vector (inverse CDF, one uniform draw).

    A long vector is walked as the grid of upper_set, column by column (any fixed order of
    the tokens gives the same distribution): the uniform picks a column by the columns'
    float64 masses, then a token inside it, one pass over the vocabulary in all.
    """
    n_cols = len(probs) // COLUMN_ROWS
    if n_cols < 64:
        cdf = np.cumsum(probs, dtype=np.float64)
        u = rng.random() * cdf[-1]
        return int(min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1))
    n = n_cols * COLUMN_ROWS
    grid = probs[:n].reshape(COLUMN_ROWS, n_cols)  # token r * n_cols + c sits at [r, c]
    tail = probs[n:]  # one more column
    col_cdf = np.cumsum(np.append(grid.sum(axis=0, dtype=np.float64), tail.sum(dtype=np.float64)))
    u = rng.random() * col_cdf[-1]
    c = int(np.searchsorted(col_cdf, u, side="right"))
    if c == len(col_cdf):  # u rounded onto the end: the last column that can be drawn from
        c = int(np.flatnonzero(np.diff(col_cdf, prepend=0.0))[-1])
    column = tail if c == n_cols else grid[:, c]
    cdf = np.cumsum(column, dtype=np.float64)
    u -= col_cdf[c - 1] if c else 0.0
    r = int(np.searchsorted(cdf, u, side="right"))
    if r == len(cdf):  # u rounded onto the column's end: its last token that can be drawn
        r = int(np.flatnonzero(column)[-1])
    return n + r if c == n_cols else r * n_cols + c
