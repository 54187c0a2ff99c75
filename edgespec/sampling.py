"""Sampling parameters and the one logits -> probabilities transform that target and draft share.

The order of the filters follows llama.cpp's default sampler chain: temperature scales the
logits, then top-k, top-p and min-p cut the tail of the resulting distribution, and what is
left is renormalized. Greedy (temperature 0) never comes through here: it is an argmax.
The work after one or two passes over the vocabulary runs on the tokens that can be drawn
(TokenDist); tests/sampling_reference.py keeps the dense transform it must agree with.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import TypeVar

import numpy as np

from edgespec.errors import SamplingParamsError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy argmax
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    seed: int | None = None
    # how a drafted token is judged (docs/exactness.md): "gumbel" keys the randomness to the
    # token's position, so the output equals plain decoding's with the same seed; "rejection"
    # is Leviathan et al.'s rejection sampling
    sampler: str = "gumbel"

    def __post_init__(self) -> None:
        check_range("temperature", self.temperature, 0.0, math.inf, "use 0 for greedy decoding")
        check_float32_temperature(self.temperature)
        if self.sampler not in SAMPLERS:
            raise SamplingParamsError(
                f"unknown sampler {self.sampler!r}; choose one of {', '.join(SAMPLERS)}"
            )
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


SAMPLERS = ("gumbel", "rejection")
FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # smallest normal float32, about 1.18e-38


def check_float32_temperature(temperature: float) -> None:
    """Logits are divided by float32(temperature): it must be a normal float32 (0 is greedy)."""
    if temperature == 0.0 or not math.isfinite(temperature):
        return
    t32 = float(np.float32(temperature))
    if not FLOAT32_TINY <= t32 < math.inf:
        raise SamplingParamsError(
            f"temperature {temperature!r} is {'0' if t32 < FLOAT32_TINY else 'infinite'} "
            f"in float32, which the logits are divided by; use 0 for greedy decoding or a "
            f"temperature between {FLOAT32_TINY:.3g} and {float(np.finfo(np.float32).max):.3g}"
        )


def check_scaled(z_max: float, sp: SamplingParams) -> None:
    """logits / temperature must stay finite: a tiny temperature turns them into inf and the
    probabilities into NaN (which always drew the last token); NaN logits are refused as
    such (nan_logits)."""
    if math.isnan(z_max):
        raise nan_logits()
    if not math.isfinite(z_max):
        raise SamplingParamsError(
            f"temperature {sp.temperature!r} overflows float32 on these logits (logit / "
            f"temperature = {z_max}); use 0 for greedy decoding or a larger temperature"
        )


def nan_logits() -> SamplingParamsError:
    return SamplingParamsError(
        "the model's logits hold NaN, so no token can be drawn; the model file or its "
        "back-end is broken: check it with `edgespec doctor`"
    )


def span_text(low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> str:
    """An interval as a message writes it: [0, 2], (0, 1]."""
    return f"{'(' if open_low else '['}{low}, {high}{')' if open_high else ']'}"


def in_range(
    value: object, low: float, high: float, *, open_low: bool = False, open_high: bool = False
) -> bool:
    """A finite number (bool excluded) inside the interval; the one rule the CLI, the Python
    API and the server check sampling values by."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    above = value > low if open_low else value >= low
    below = value < high if open_high else value <= high
    return above and below


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
    if not in_range(value, low, high, open_low=open_low, open_high=open_high):
        span = span_text(low, high, open_low=open_low, open_high=open_high)
        raise SamplingParamsError(f"{name} must be in {span}, got {value!r}; {fix}")


def keeps_row(sp: SamplingParams, n_columns: int) -> bool:
    """Whether token_dist keeps the row itself (temperature alone: ScaledRow), not a support
    drawn from it: a row read in a back-end's buffer is then copied first (BufferRows)."""
    return not 0 < sp.top_k < n_columns and sp.top_p >= 1.0 and sp.min_p <= 0.0


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
        """The token at `position` of the request with this seed: argmax(log p + g) with g
        the position's Gumbel noise, as argmin(E / p) over the support with E = exp(-g) ~
        Exp(1) (exponential_noise): one uniform per token that can be drawn, and the token
        follows p exactly. A drafter that takes argmax(log q + g) with the same g proposes the
        target's own token whenever the two agree (the coupling verify_gumbel relies on)."""
        if self.size < RACE_FRONT_MIN:  # a small support races whole
            return self.token_at(int(np.argmin(self.races(seed, position))))
        j, races = self.race_front(seed, position, places=1)
        return self.token_at(int(j[np.argmin(races)]))

    def gumbel_max_margin(self, seed: int, position: int) -> tuple[int, float]:
        """gumbel_max's token and how far it won: the gap between the largest and the second
        largest log p + g, log(r2 / r1) of the two smallest E / p (inf where one token can be
        drawn). A Gumbel draft's confidence: the target's p, close to q, keeps the draft's
        token where its own perturbed scores keep that order, likelier the wider the gap."""
        j, races = self.race_front(seed, position, places=2)
        token = self.token_at(int(j[np.argmin(races)]))
        if len(races) < 2:
            return token, math.inf
        first, second = np.partition(races, 1)[:2]
        return token, float(np.log(second / first))

    def token_at(self, j: int) -> int:
        return j if self.ids is None else int(self.ids[j])

    def token_ids(self) -> np.ndarray:
        """The token id of each entry of the support (all_ids where dense)."""
        return self.ids if self.ids is not None else all_ids(self.size)

    def races(self, seed: int, position: int) -> np.ndarray:
        """E / p per token of the support (p: weights()), E the position's Exp(1) noise: the
        smallest wins. A token of probability 0 (an exp underflow) gets inf, even where its E
        is 0."""
        ids = self.token_ids()
        return divide_races(exponential_noise(seed, position, ids), self.weights())

    def race_front(self, seed: int, position: int, places: int) -> tuple[np.ndarray, np.ndarray]:
        """(j ascending, races[j]): entries of the support, as indices into probs, holding
        every entry whose race is at most the places-th smallest (1 or 2), so that their
        first argmin (and, for 2, their two smallest races) are the whole support's.

        A token j of noise block b races at least e_min[b] / p_j, e_min[b] its block's
        smallest noise (block_min_noise: one hash a block). Given r, a bound on the
        places-th smallest race, only tokens with e_min[b] <= r p_j can reach it, and only
        blocks whose largest p reaches e_min / r hold any: those few tokens are hashed
        (dense_race_front, sparse_race_front). Below RACE_FRONT_MIN tokens the whole race
        costs less than the fixed work."""
        n = self.size
        if n < RACE_FRONT_MIN:
            return np.arange(n), self.races(seed, position)
        if self.ids is None:
            return self.dense_race_front(seed, position, places)
        return self.sparse_race_front(seed, position, places)

    def dense_race_front(
        self, seed: int, position: int, places: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """race_front of a dense row. Each noise block is bounded by its own largest weight
        (block_maxima: one strided pass over the row): a token j of block b races at least
        e_min[b] / p_j >= e_min[b] / w_max[b]. Given a reach R, only tokens with e_min[b] <=
        R p_j can race below R, and only blocks with e_min <= R w_max hold any: those few are
        hashed, in one call. R starts at FRONT_REACH races of the likeliest token (its noise
        is that far above its mean 1 once in 50 rows), or the holders' (a block's holder
        races for free: its noise is the block's smallest); where the places-th smallest race
        found lies above R, R rises to it and the tokens it adds race too."""
        n = self.size
        w_max = self.scaled.block_weights() if self.scaled is not None else block_maxima(self.probs)
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
            races = divide_races(e_min[blocks], self.weights(j))
            reach_s = min(reach_s, reach(races, places))
        held = j  # ascending
        hashed_to = 0.0  # tokens with e_min <= hashed_to * p_j have raced
        while True:
            more = tokens_of_blocks(np.flatnonzero(e_min <= reach_s * w_max), all_ids(n), n)
            bound = e_min[block_of(more)]
            w = self.weights(more)
            more = more[(bound <= reach_s * w) & (bound > hashed_to * w)]
            if len(held):
                more = more[~in_sorted(more, held)]
            j = np.concatenate([j, more])
            races = np.concatenate([races, self.race_of(more, seed, position)])
            r = reach(races, places)
            if r <= reach_s:
                break
            if not math.isfinite(r):  # fewer than `places` raced: look 64x as far, then
                if reach_s > FRONT_REACH * 2.0**40 / w_top:  # everywhere (all others p = 0)
                    return np.arange(n), self.races(seed, position)
                r = reach_s * 64.0
            hashed_to, reach_s = reach_s, r
        front = races <= r
        j, races = j[front], races[front]
        order = np.argsort(j)
        return j[order], races[order]

    def sparse_race_front(
        self, seed: int, position: int, places: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """race_front of a sparse support: its likeliest m tokens race first (upper_set:
        every other token has p below their smallest, p_b), r is the places-th smallest of
        their races, and a block can hold another token that reaches r only if e_min <= r
        p_b. Where many blocks pass (a flat support), the tokens holding their smallest
        noise race first, unhashed (their noise is e_min), and tighten r."""
        ids, n = self.token_ids(), self.size
        front = upper_set(self.probs, min(RACE_FRONT, n // COLUMN_ROWS // 4), np.float32(1.0))[0]
        j, races = front, self.race_of(front, seed, position)
        p_b = float(self.probs[front].min())
        if not (p_b > 0.0 and math.isfinite(reach(races, places))):
            return np.arange(n), self.races(seed, position)
        e_min, holder = block_min_noise(seed, position, all_ids(block_count(int(ids[-1]) + 1)))
        blocks = np.flatnonzero(e_min <= reach(races, places) * p_b)
        held = np.empty(0, np.int64)
        if len(blocks) > HOLDERS_FIRST:
            held = np.sort(holder_entries(blocks, holder[blocks], ids, n))
            held = held[~in_sorted(held, front)]
            held_races = divide_races(e_min[block_of(ids[held])], self.weights(held))
            j, races = np.concatenate([j, held]), np.concatenate([races, held_races])
            blocks = blocks[e_min[blocks] <= reach(races, places) * p_b]
        more = tokens_of_blocks(blocks, ids, n)
        more = more[e_min[block_of(ids[more])] <= reach(races, places) * self.weights(more)]
        more = more[~in_sorted(more, front) & ~in_sorted(more, held)]
        j = np.concatenate([j, more])
        races = np.concatenate([races, self.race_of(more, seed, position)])
        order = np.argsort(j)
        return j[order], races[order]

    def race_of(self, j: np.ndarray, seed: int, position: int) -> np.ndarray:
        """E / p of entries j, each hashed (exponential_noise)."""
        return divide_races(exponential_noise(seed, position, self.token_ids()[j]), self.weights(j))


def in_sorted(x: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """Whether each of x is in `ascending` (np.isin's fixed cost was a fifth of a race)."""
    at = np.searchsorted(ascending, x)
    at[at == len(ascending)] = 0
    return ascending[at] == x if len(ascending) else np.zeros(len(x), dtype=bool)


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


def divide_races(noise: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """E / p in float64, inf where p is 0 (or so small that E / p overflows): [m] each."""
    out = np.full(len(noise), np.inf)
    if probs.dtype != np.float64:  # float32 p >= 1e-45: no overflow, and no errstate's 1.3 us
        return np.divide(noise, probs, out=out, where=probs > 0)
    with np.errstate(over="ignore"):  # a scaled row's weight of 1e-310
        return np.divide(noise, probs, out=out, where=probs > 0)


# --- position-keyed randomness: the token at position i depends on (seed, i) alone ----------

GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
MASK64 = (1 << 64) - 1
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's multipliers


def mix64_int(x: int) -> int:
    """splitmix64's finalizer on one Python int (mod 2**64)."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * MIX1) & MASK64
    x = ((x ^ (x >> 27)) * MIX2) & MASK64
    return x ^ (x >> 31)


def position_key(seed: int, position: int) -> int:
    """One 64-bit key per (seed, position); seeds wider than 64 bits are folded in."""
    return mix64_int(seed_key(seed) + (position + 1) * GOLDEN)


@lru_cache(maxsize=16)
def seed_key(seed: int) -> int:
    """The seed folded to 64 bits, 64 at a time: what position_key adds each position to."""
    key = 0
    while True:
        key = mix64_int(key + (seed & MASK64) + GOLDEN)
        seed >>= 64
        if not seed:
            return key


@lru_cache(maxsize=8)
def all_ids(n: int) -> np.ndarray:
    """[n] int64 0..n-1: the dense support, made once per vocabulary size (and per count of
    noise blocks: race_front)."""
    ids = np.arange(n, dtype=np.int64)
    ids.flags.writeable = False
    return ids


def is_all_ids(ids: np.ndarray) -> bool:
    """Whether ids is all_ids(len(ids)) itself (looked up only for arrays that could be)."""
    n = len(ids)
    return bool(n and not ids.flags.writeable and ids[0] == 0 and ids[-1] == n - 1) and (
        ids is all_ids(n)
    )


def uint64s(*values: int) -> tuple[np.ndarray, ...]:
    """0-d uint64 arrays: a ufunc takes one as an operand ~0.5 us sooner than a numpy scalar
    (a sampled step hashes in ~10 calls of ~10 ufuncs)."""
    return tuple(np.array(v, dtype=np.uint64) for v in values)


SHIFTS = uint64s(30, 27, 31)
MIXERS = uint64s(MIX1, MIX2)
U64_GOLDEN, U64_11 = uint64s(GOLDEN, 11)


def mixed(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 counters, in place (wrapping mod 2**64)."""
    t = np.right_shift(x, SHIFTS[0])
    np.bitwise_xor(x, t, out=x)
    np.multiply(x, MIXERS[0], out=x)
    np.right_shift(x, SHIFTS[1], out=t)
    np.bitwise_xor(x, t, out=x)
    np.multiply(x, MIXERS[1], out=x)
    np.right_shift(x, SHIFTS[2], out=t)
    np.bitwise_xor(x, t, out=x)
    return x


def uniforms(bits: np.ndarray) -> np.ndarray:
    """[m] float64 uniforms in (0, 1) from the top 53 bits of splitmix64 outputs."""
    u = np.right_shift(bits, U64_11).astype(np.float64)
    u += 0.5
    u *= 2.0**-53
    return u


# The noise's blocks: ids are laid out in bands of NOISE_BLOCK rows of NOISE_STRIDE, and a
# block is one column of a band, its NOISE_BLOCK tokens NOISE_STRIDE ids apart (slot r of
# block c of band g is id g * NOISE_BAND + r * NOISE_STRIDE + c). A row's largest logit per
# block is then one strided max over the row (block_maxima: 12 us for 152k float32 columns
# on the EPYC, where the max of each 64 adjacent ids cost 142), and the layout depends on no
# vocabulary size: a draft's ids get the noise the target's do.
NOISE_BLOCK_BITS = 7
NOISE_BLOCK = 1 << NOISE_BLOCK_BITS  # tokens (slots) a block
NOISE_STRIDE_BITS = 11
NOISE_STRIDE = 1 << NOISE_STRIDE_BITS  # blocks a band
NOISE_BAND_BITS = NOISE_BLOCK_BITS + NOISE_STRIDE_BITS
NOISE_BAND = 1 << NOISE_BAND_BITS  # ids a band
FRONT_REACH = 4.0  # a dense race's first reach, in races of its likeliest token (dense_race_front)
U64_SLOT = uint64s(NOISE_BLOCK - 1)[0]  # a block's slot: an id's bits below it


def block_of(ids: np.ndarray) -> np.ndarray:
    """The noise block of each token id."""
    return ((ids >> NOISE_BAND_BITS) << NOISE_STRIDE_BITS) | (ids & (NOISE_STRIDE - 1))


def slot_of(ids: np.ndarray) -> np.ndarray:
    """Each token id's slot (0..NOISE_BLOCK - 1) in its noise block."""
    return (ids >> NOISE_STRIDE_BITS) & (NOISE_BLOCK - 1)


def block_tokens(blocks: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """The token id at each (block, slot): block_of and slot_of undone (broadcasting)."""
    band = (blocks >> NOISE_STRIDE_BITS) << NOISE_BAND_BITS
    return band | (slots << NOISE_STRIDE_BITS) | (blocks & (NOISE_STRIDE - 1))


def block_count(n: int) -> int:
    """Noise blocks holding any of token ids 0..n-1 (n >= 1)."""
    last_band = (n - 1) >> NOISE_BAND_BITS
    return (last_band << NOISE_STRIDE_BITS) + min(NOISE_STRIDE, n - (last_band << NOISE_BAND_BITS))


def down_maxima(rows: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Each column's largest entry down a grid [..., r, c] (a view of rows [..., V]), by
    np.fmax's reduction: on 5 rows of 151,936 logits the host had not read yet (a GPU's,
    copied over), the rows' max and fmax's reduction took 134 us where np.maximum's strided
    reduction took 236 (in cache: 66 and 58; the Zen 5 EPYC). A row holding NaN is refused
    (refuse_nan)."""
    refuse_nan(rows)
    return np.fmax.reduce(grid, axis=-2)


def refuse_nan(rows: np.ndarray) -> None:
    """The rows' own max, first (a contiguous read brings them into cache): a row holding
    NaN is refused (nan_logits), which np.fmax's reductions would pass over."""
    if np.isnan(rows.max(axis=-1)).any():
        raise nan_logits()


def block_maxima(row: np.ndarray) -> np.ndarray:
    """[..., block_count(V)] each noise block's largest entry of dense rows [..., V]: per
    band, a max down its rows (strided: numpy runs it across the columns at once, by
    np.fmax as down_maxima; a row holding NaN is refused)."""
    refuse_nan(row)
    out = []
    lead = row.shape[:-1]
    for start in range(0, row.shape[-1], NOISE_BAND):
        band = row[..., start : start + NOISE_BAND]
        rows = band.shape[-1] // NOISE_STRIDE
        rest = band[..., rows * NOISE_STRIDE :]
        if not rows:
            out.append(rest)
            continue
        grid = band[..., : rows * NOISE_STRIDE].reshape(*lead, rows, NOISE_STRIDE)
        top = np.fmax.reduce(grid, axis=-2)
        width = rest.shape[-1]
        np.maximum(top[..., :width], rest, out=top[..., :width])
        out.append(top)
    return out[0] if len(out) == 1 else np.concatenate(out, axis=-1)


BLOCK_SALT = 0x6A09E667F3BCC908  # the blocks' key apart from the tokens' (sqrt(2)'s bits)


@lru_cache(maxsize=64)
def noise_offsets(seed: int, position: int) -> tuple[np.uint64, np.uint64]:
    """What the tokens' and the noise blocks' splitmix64 counters at (seed, position) add to
    id * GOLDEN: GOLDEN + their key (mod 2**64). A race asks for one position's noise three
    or four times (race_front)."""
    token_offset, block_offset = position_offsets(position_key(seed, position))
    return np.uint64(token_offset), np.uint64(block_offset)


def position_offsets(key: int) -> tuple[int, int]:
    """noise_offsets of a position's key, as Python ints."""
    return (key + GOLDEN) & MASK64, (mix64_int(key ^ BLOCK_SALT) + GOLDEN) & MASK64


def block_minima(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mixed block counters -> each block's smallest Exp(1) noise (block_min_e), and which
    of its slots holds it (the bottom NOISE_BLOCK_BITS)."""
    return block_min_e(bits), np.bitwise_and(bits, U64_SLOT).astype(np.int64)


def block_min_e(bits: np.ndarray) -> np.ndarray:
    """Mixed block counters -> each block's smallest Exp(1) noise, -log(U) / NOISE_BLOCK (U
    from the top 53 bits): a bound, where which slot holds it is not asked."""
    e_min = uniforms(bits)
    np.log(e_min, out=e_min)
    e_min *= -1.0 / NOISE_BLOCK
    return e_min


def block_min_noise(seed: int, position: int, blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For noise blocks `blocks` at `position`: the smallest Exp(1) noise of each block's
    NOISE_BLOCK slots and which slot holds it (a slot past the vocabulary's end may: the
    smallest is then a bound on the tokens'); one splitmix64 output a block: counter
    (block + 1) * GOLDEN + the blocks' key."""
    return block_noise_at(blocks, noise_offsets(seed, position)[1])


def block_noise_at(
    blocks: np.ndarray, block_offset: np.uint64 | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """block_min_noise of blocks at the positions whose noise_offsets' block part this is:
    one for all, or one per block (broadcasting: a step's rows at once)."""
    bits = block_bits(blocks, block_offset)
    e_min, holder = block_minima(bits.ravel())
    return e_min.reshape(bits.shape), holder.reshape(bits.shape)


def block_bits(blocks: np.ndarray, block_offset: np.uint64 | np.ndarray) -> np.ndarray:
    """The mixed splitmix64 outputs block_noise_at draws its blocks' noise from
    (block_minima), broadcast as it does."""
    return mixed(np.multiply(blocks.astype(np.uint64), U64_GOLDEN) + block_offset)


def every_block_bits(n_blocks: int, block_offsets: np.ndarray) -> np.ndarray:
    """block_bits of noise blocks 0..n_blocks - 1 at each of the positions whose block
    offsets these are: [len(block_offsets), n_blocks]."""
    return mixed(block_counters(n_blocks) + block_offsets[:, None])


@lru_cache(maxsize=8)
def block_counters(n_blocks: int) -> np.ndarray:
    """[n_blocks] uint64 block * GOLDEN (mod 2**64), made once a vocabulary: what a position's
    block offset is added to (block_bits)."""
    counters = np.multiply(all_ids(n_blocks).astype(np.uint64), U64_GOLDEN)
    counters.flags.writeable = False
    return counters


def row_noise_offsets(seed: int, position: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """[n] uint64 each: noise_offsets' token and block parts at positions position + i, read
    from runs of OFFSET_RUN positions mixed at once (offset_run; read-only)."""
    first = position - position % OFFSET_RUN
    runs = [offset_run(seed, at) for at in range(first, position + n, OFFSET_RUN)]
    skip = position - first
    if len(runs) == 1:
        return runs[0][0][skip : skip + n], runs[0][1][skip : skip + n]
    tokens, blocks = (np.concatenate(part)[skip : skip + n] for part in zip(*runs))
    return tokens, blocks


# positions whose noise offsets are mixed at once: a step asks for its k + 1 in a row, and
# mixing 5 of them as Python ints cost ~10 us (the Zen 5 EPYC), about a run's
OFFSET_RUN = 64


@lru_cache(maxsize=16)
def offset_run(seed: int, first: int) -> tuple[np.ndarray, np.ndarray]:
    """position_offsets of positions first .. first + OFFSET_RUN - 1 at seed, in uint64
    arithmetic (wrapping mod 2**64, as the Python ints are masked): [OFFSET_RUN] each."""
    keys = np.multiply(all_ids(OFFSET_RUN).astype(np.uint64), U64_GOLDEN)
    keys += np.uint64((seed_key(seed) + (first + 1) * GOLDEN) & MASK64)
    mixed(keys)
    blocks = mixed(np.bitwise_xor(keys, np.uint64(BLOCK_SALT)))
    keys += U64_GOLDEN
    blocks += U64_GOLDEN
    keys.flags.writeable = blocks.flags.writeable = False
    return keys, blocks


def true_at(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.nonzero of a 2-D mask (rows, columns of its True entries, row by row), found as
    flat indices: numpy's 2-D nonzero took 35 us on 5 x 4,097 where this takes 4 (the
    EPYC)."""
    rows, columns = np.divmod(np.flatnonzero(mask), max(mask.shape[1], 1))
    return rows, columns


def float32_ceiling(x: np.ndarray) -> np.ndarray:
    """The least float32 at or above each float64 of x: a float32 v >= x exactly where
    v >= float32_ceiling(x), a compare that needs no float64 copy of v."""
    y = x.astype(np.float32)
    return np.where(y < x, np.nextafter(y, np.float32(np.inf)), y)


def along_rows(a: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index of entries at[i, j] of each row i of a 2-D array, for a[...] to read or
    write: np.take_along_axis's on axis 1 without its per-call setup (5.0 -> 2.1 us a read
    of [5, 41], the EPYC)."""
    return np.arange(len(a))[:, None], at


def row_ranges(row_of: np.ndarray, n: int) -> list[tuple[int, int]]:
    """[n] (start, end) of each row's entries in row_of (ascending row numbers; a row with
    none gets an empty range)."""
    ends = np.searchsorted(row_of, np.arange(1, n + 1)).tolist()
    return list(zip([0, *ends[:-1]], ends))


def exponential_noise(seed: int, position: int, ids: np.ndarray) -> np.ndarray:
    """[m] float64 Exp(1) noise for tokens `ids` at `position`, keyed by (seed, position,
    token): the same token at the same position always gets the same number, whichever
    step, drafter or support asks.

    Drawn a block of NOISE_BLOCK slots at a time (block_of), so that a block none of whose
    tokens can win a race is skipped with one hash (race_front): the block's largest uniform
    is M = U^(1/128) (block_min_noise), held by one of its slots chosen uniformly, and every
    other slot's is M u_j, u_j its own uniform. The maximum of 128 uniforms has CDF m^128,
    its holder is uniform and the rest are uniform below it, independently: jointly these are
    128 i.i.d. uniforms, and E = -log(uniform) is i.i.d. Exp(1). The tokens' and their
    blocks' counters are mixed in one array (a small support's cost is numpy's per-call
    overhead)."""
    return noise_at(ids, *noise_offsets(seed, position))


def noise_at(
    ids: np.ndarray, token_offset: np.uint64 | np.ndarray, block_offset: np.uint64 | np.ndarray
) -> np.ndarray:
    """exponential_noise of tokens ids at the positions whose noise_offsets these are: one
    pair for all, or one per token ([m] uint64 each: a step's rows at once)."""
    m = len(ids)
    x = np.empty(2 * m, np.uint64)  # counters (id + 1) * GOLDEN + key, then (block + 1) ...
    x[:m] = ids
    x[m:] = block_of(ids)
    np.multiply(x, U64_GOLDEN, out=x)
    x[:m] += token_offset
    x[m:] += block_offset
    holder = np.bitwise_and(mixed(x)[m:], U64_SLOT)
    u = uniforms(x)
    np.log(u, out=u)  # log u_j of the tokens' own uniforms, then log U of their blocks'
    log_own, noise = u[:m], u[m:]
    noise *= -1.0 / NOISE_BLOCK  # -log M = the block's smallest E
    log_own[slot_of(ids) == holder] = 0.0  # the holder's uniform is M itself
    noise -= log_own  # -log(M u_j)
    return noise


def request_params(sp: SamplingParams) -> SamplingParams:
    """A request's sampling parameters as the loop uses them: a seed always (a fresh random
    one when none is given: the randomness is keyed to it)."""
    if sp.greedy or sp.seed is not None:
        return sp
    return replace(sp, seed=secrets.randbits(63))


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
    tokens at probability 0 leave the support."""
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
    if sp.top_p >= 1.0 and sp.min_p <= 0.0:
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
    row_of, j = true_at(values >= float32_ceiling(low)[:, None])  # values >= low, in float32
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


# weights (exp(z - max z)) from which SpareNuclei orders a row's columns, the first under
# which they hold top-p of the most the row can weigh (so its nucleus ends among them), else
# all of them: under top-p 0.9 the first holds the nucleus in 100% of the demo target's real
# rows at T 0.8 and 98.4% at T 1.0 (the second 0.3%)
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
            order = heaviest_columns(values, columns)
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
        column, as heaviest_columns), laid out (lay_out). A weight floor is a logit floor (exp
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


def row_dists(logits: np.ndarray, sp: SamplingParams) -> RowDists:
    """[n, V] logits -> (i -> token_dist(logits[i], sp)), computed only when asked for."""
    return RowDists(logits, sp)


class PassRows:
    """A verify pass's rows as the distributions their tokens are drawn from (i -> row i's
    TokenDist), and every row's Gumbel-max token at once where one call for all rows costs
    less than one a row (verify_gumbel asks gumbel_maxes first)."""

    def __call__(self, i: int) -> TokenDist:
        raise NotImplementedError

    def gumbel_maxes(self, seed: int, position: int) -> np.ndarray | None:
        """[n] row i's gumbel_max(seed, position + i), every row at once; None: row by row."""
        return None


class DecidedRows(PassRows):
    """n rows whose distributions `dist` gives, each computed once: a device's candidates
    (runtimes/sampling_head.py), the row's logits where they cannot decide it. Their supports
    race in one hash call (gumbel_max_supports)."""

    def __init__(self, n: int, dist: Callable[[int], TokenDist]) -> None:
        self.n, self.dist = n, dist
        self.known: dict[int, TokenDist] = {}

    def __call__(self, i: int) -> TokenDist:
        if i not in self.known:
            self.known[i] = self.dist(i)
        return self.known[i]

    def gumbel_maxes(self, seed: int, position: int) -> np.ndarray | None:
        return gumbel_max_supports([self(i) for i in range(self.n)], seed, position)


class TopKRows(PassRows):
    """A step's rows under top-k, as their top k tokens: ids [n, k] ascending in each row and
    their z = logit / temperature (top_k_rows on the host, or the device's columns: llama.cpp's
    backend sampler). Row i is top_k_dist(ids[i], z[i], sp); their Gumbel-max tokens race in
    one call for all rows, each row's arithmetic as top_k_dist's, bit for bit (a k = 4 step
    built five TokenDists, ~60 numpy calls a row)."""

    def __init__(self, ids: np.ndarray, z: np.ndarray, sp: SamplingParams) -> None:
        self.ids, self.z, self.sp = ids, z, sp

    def __call__(self, i: int) -> TokenDist:
        return top_k_dist(self.ids[i], self.z[i], self.sp)

    def gumbel_maxes(self, seed: int, position: int) -> np.ndarray | None:
        n, k = self.ids.shape
        probs = top_k_probs(self.z, self.sp)  # 0 where top-p or min-p cut: it races at inf
        token_offsets, block_offsets = row_noise_offsets(seed, position, n)
        row_of = np.repeat(np.arange(n), k)
        noise = noise_at(self.ids.ravel(), token_offsets[row_of], block_offsets[row_of])
        races = divide_races(noise, probs.ravel()).reshape(n, k)
        return self.ids[np.arange(n), races.argmin(axis=1)]  # ties: the lowest id


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
        order = np.argsort(-weights, axis=1, kind="stable")
        heaviest = weights[along_rows(weights, order)]
        before = np.zeros(heaviest.shape)
        np.cumsum(heaviest[:, :-1], axis=1, dtype=np.float64, out=before[:, 1:])
        keep = np.empty(weights.shape, dtype=bool)
        keep[along_rows(keep, order)] = before < sp.top_p * total[:, None]
        weights = weights * keep
    if sp.min_p > 0.0:
        floor = sp.min_p * weights.max(axis=1, keepdims=True)
        weights = np.where(weights >= floor, weights, 0.0)
    return (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)


class RowDists(PassRows):
    """A verify pass's logits as the distributions their tokens are drawn from: row i's
    token_dist when asked for it, and under temperature alone every row's Gumbel-max token at
    once (gumbel_maxes)."""

    def __init__(self, logits: np.ndarray, sp: SamplingParams) -> None:
        self.logits, self.sp = logits, sp

    def __call__(self, i: int) -> TokenDist:
        return token_dist(self.logits[i], self.sp)

    def gumbel_maxes(self, seed: int, position: int) -> np.ndarray | None:
        """[n] row i's token_dist(...).gumbel_max(seed, position + i), every row at once:
        under temperature alone in one pass over the rows (gumbel_max_rows, a large
        vocabulary), else the small supports in one race (gumbel_max_supports); None for
        temperature alone on a small vocabulary (each row races its own)."""
        sp, width = self.sp, self.logits.shape[-1]
        if sp.greedy:
            return None
        if 0 < sp.top_k <= TOP_K_ROWS and sp.top_k < width:  # each support k tokens or fewer
            rows = np.asarray(self.logits, dtype=np.float32)
            ids, z = zip(*top_k_rows(rows, sp.top_k, np.float32(sp.temperature)))
            return TopKRows(np.stack(ids), np.stack(z), sp).gumbel_maxes(seed, position)
        if sp.top_k == 0 and sp.top_p >= 1.0 and sp.min_p > 0.0 and width >= RACE_FRONT_MIN:
            return min_p_rows(np.asarray(self.logits, dtype=np.float32), sp, seed, position)
        if sp.top_k > 0 or sp.top_p < 1.0 or sp.min_p > 0.0:
            dists = [self(i) for i in range(len(self.logits))]
            return gumbel_max_supports(dists, seed, position)
        if width < RACE_FRONT_MIN:
            return None
        return gumbel_max_rows(self.logits, sp, seed, position)


class BufferRows(RowDists):
    """RowDists of a pass's logits read in a back-end's own buffer (llama.cpp's), not a copy
    of it: valid() while the buffer still holds them, and asked for after that, an error. A
    row token_dist keeps whole (temperature alone) is copied first, as a draft's q outlives
    the pass; every other distribution is drawn from the row at once."""

    def __init__(self, logits: np.ndarray, sp: SamplingParams, valid: Callable[[], bool]) -> None:
        super().__init__(logits, sp)
        self.valid, self.copy_first = valid, keeps_row(sp, logits.shape[-1])

    def __call__(self, i: int) -> TokenDist:
        self.check()
        row = self.logits[i]
        return token_dist(np.array(row) if self.copy_first else row, self.sp)

    def gumbel_maxes(self, seed: int, position: int) -> np.ndarray | None:
        self.check()
        return super().gumbel_maxes(seed, position)

    def check(self) -> None:
        if not self.valid():
            raise RuntimeError("a step's rows were read after the runtime's next pass")


# the largest top-k whose rows RowDists races at once (their supports race whole)
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
    cut = float32_ceiling((z_max + math.log(sp.min_p) - 1e-3) * float(sp.temperature))
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


RACE_FRONT = 256  # the likeliest tokens a large race runs first
RACE_FRONT_MIN = 16_384  # a Gumbel race over this many tokens or more runs its front first
COLUMN_ROWS = 64  # tokens per column of the grid upper_set bounds the k-th value with


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
    """Indices at (ascending) sorted by weights[at] descending, ties by index. A long one is
    sorted as one uint64 key each, the weight's float32 bits complemented over the index
    (numpy's vectorized sort; the stable argsort of 152k float32 costs twice as much)."""
    w = np.asarray(weights[at], dtype=np.float32)
    if len(at) < 4096:
        return at[np.argsort(-w, kind="stable")]
    return at[descending_order(w)]


# columns from which heaviest_columns sorts packed keys (descending_order): 5 rows of 4,097
# in 0.46 ms where the stable argsort took 1.18 (the EPYC); at 1,025 the argsort is as fast,
# below it faster
PACKED_SORT_FROM = 2048


def heaviest_columns(values: np.ndarray, width: int) -> np.ndarray:
    """[n, width] indices of each row's width largest values (float32, no NaN: [n, m]),
    largest first, ties by index: the first width of each row's stable argsort of -values
    where no tie crosses the width's edge (else some of those tied). Below all m, a
    partition first: only the width are sorted."""
    n, m = values.shape
    if width >= m:
        at = np.broadcast_to(np.arange(m), (n, m))
    else:
        at = np.sort(np.argpartition(values, m - width, axis=1)[:, m - width :], axis=1)
        values = np.take_along_axis(values, at, 1)  # in index order: ties stay by index
    if width >= PACKED_SORT_FROM and values.dtype == np.float32:
        order = descending_order(values)
    else:
        order = np.argsort(-values, axis=1, kind="stable")
    return np.take_along_axis(at, order, 1)


def descending_order(values: np.ndarray) -> np.ndarray:
    """Indices along the last axis of float32 values (no NaN) by value, largest first, ties
    by index: a stable argsort of -values, done as one sort of unique uint64 keys, the
    value's bits mapped to their order as unsigned ints, complemented, above the index
    (numpy's vectorized sort: the stable argsort of 152k float32 costs twice as much, of
    5 x 4,097 2.6 times as much on the EPYC). -0.0 ties with 0.0."""
    bits = (values + np.float32(0.0)).view(np.uint32)  # -0.0 as +0.0: equal, so tied
    negative = bits >= np.uint32(1 << 31)
    ascending = np.where(negative, ~bits, bits | np.uint32(1 << 31))  # float order, unsigned
    keys = (~ascending).astype(np.uint64) << np.uint64(32)
    keys |= np.arange(values.shape[-1], dtype=np.uint64)
    keys.sort(axis=-1)
    return (keys & np.uint64(0xFFFFFFFF)).astype(np.intp)


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
    left out, or the head is large: the whole row decides (dense_top_p). Where the peak alone
    reaches top-p of the most the total can be (69% of the demo target's rows at top-p
    0.3-0.99 and temperature 0.3-2), the nucleus is the peak, unsorted: a k = 4 step's
    host work at temperature 0.8 and top-p 0.9 485 -> 455 us (bench/loop_overhead.py)."""
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
    if high <= 1.0:  # the peak (weight exp(0)) alone reaches top-p of any total the row has:
        peak = int(np.argmax(w))  # nucleus's answer, its first token (ties: the lowest id)
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
