"""Position-keyed randomness: the token at position i of a seeded request depends on (seed, i)
alone, through counter-based splitmix64 noise drawn a block of token ids at a time."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from edgespec.sampling.params import nan_logits

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


def mixed(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 counters, in place (wrapping mod 2**64)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(MIX1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(MIX2)
    x ^= x >> np.uint64(31)
    return x


def uniforms(bits: np.ndarray) -> np.ndarray:
    """[m] float64 uniforms in (0, 1) from the top 53 bits of splitmix64 outputs."""
    u = (bits >> np.uint64(11)).astype(np.float64)
    u += 0.5
    u *= 2.0**-53
    return u


# The noise's blocks: ids are laid out in bands of NOISE_BLOCK rows of NOISE_STRIDE, and a
# block is one column of a band, its NOISE_BLOCK tokens NOISE_STRIDE ids apart (slot r of
# block c of band g is id g * NOISE_BAND + r * NOISE_STRIDE + c). A row's largest logit per
# block is then one strided max over the row (block_maxima; its cost: docs/decisions.md),
# and the layout depends on no vocabulary size: a draft's ids get the noise the target's do.
NOISE_BLOCK_BITS = 7
NOISE_BLOCK = 1 << NOISE_BLOCK_BITS  # tokens (slots) a block
NOISE_STRIDE_BITS = 11
NOISE_STRIDE = 1 << NOISE_STRIDE_BITS  # blocks a band
NOISE_BAND_BITS = NOISE_BLOCK_BITS + NOISE_STRIDE_BITS
NOISE_BAND = 1 << NOISE_BAND_BITS  # ids a band


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
    return block_min_e(bits), np.bitwise_and(bits, np.uint64(NOISE_BLOCK - 1)).astype(np.int64)


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
    return mixed(np.multiply(blocks.astype(np.uint64), np.uint64(GOLDEN)) + block_offset)


def every_block_bits(n_blocks: int, block_offsets: np.ndarray) -> np.ndarray:
    """block_bits of noise blocks 0..n_blocks - 1 at each of the positions whose block
    offsets these are: [len(block_offsets), n_blocks]."""
    return mixed(block_counters(n_blocks) + block_offsets[:, None])


@lru_cache(maxsize=8)
def block_counters(n_blocks: int) -> np.ndarray:
    """[n_blocks] uint64 block * GOLDEN (mod 2**64), made once a vocabulary: what a position's
    block offset is added to (block_bits)."""
    counters = np.multiply(all_ids(n_blocks).astype(np.uint64), np.uint64(GOLDEN))
    counters.flags.writeable = False
    return counters


def row_noise_offsets(seed: int, position: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """[n] uint64 each: noise_offsets' token and block parts at positions position + i."""
    pairs = [position_offsets(position_key(seed, at)) for at in range(position, position + n)]
    return np.array(pairs, dtype=np.uint64).reshape(n, 2).T


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
    np.multiply(x, np.uint64(GOLDEN), out=x)
    x[:m] += token_offset
    x[m:] += block_offset
    holder = np.bitwise_and(mixed(x)[m:], np.uint64(NOISE_BLOCK - 1))
    u = uniforms(x)
    np.log(u, out=u)  # log u_j of the tokens' own uniforms, then log U of their blocks'
    log_own, noise = u[:m], u[m:]
    noise *= -1.0 / NOISE_BLOCK  # -log M = the block's smallest E
    log_own[slot_of(ids) == holder] = 0.0  # the holder's uniform is M itself
    noise -= log_own  # -log(M u_j)
    return noise
