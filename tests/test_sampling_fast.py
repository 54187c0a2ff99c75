"""The candidate-set transform (edgespec.sampling) against the dense reference it replaced
(tests/sampling_reference.py): the same support token for token, the same probabilities to
float32 rounding, at every row of a verify pass; the sampler and the lazy verifier against
their dense counterparts, seed for seed."""

import math

import numpy as np
import pytest

from edgespec.errors import SamplingParamsError
from edgespec.runtimes.sampling_head import Columns, spare_rows, top_k_of_candidates
from edgespec.sampling import (
    COLUMN_ROWS,
    RACE_FRONT_MIN,
    SamplingParams,
    SpareNuclei,
    TokenDist,
    all_ids,
    block_count,
    block_maxima,
    block_min_noise,
    block_of,
    block_tokens,
    divide_races,
    exponential_noise,
    gumbel_max_rows,
    holder_entries,
    min_p_support,
    noise_offsets,
    row_dists,
    row_noise_offsets,
    sample,
    spare_gumbel_maxes,
    spare_min_p_dist,
    spare_min_p_supports,
    token_dist,
    tokens_of_blocks,
    top_k_dist,
    top_k_probs,
    top_p_head,
    upper_set,
)
from edgespec.verify import residual, residual_dist, verify_gumbel, verify_stochastic
from tests import sampling_reference as reference

CONFIGS = {
    "T0.8": SamplingParams(0.8),
    "T0.8-topk40": SamplingParams(0.8, top_k=40),
    "T0.8-topk40-topp0.9": SamplingParams(0.8, top_k=40, top_p=0.9),
    "T1-topp0.9": SamplingParams(1.0, top_p=0.9),
    "T0.7-minp0.05": SamplingParams(0.7, min_p=0.05),
    "T1.3-topk100-topp0.8-minp0.02": SamplingParams(1.3, top_k=100, top_p=0.8, min_p=0.02),
    "T0.6-topk1": SamplingParams(0.6, top_k=1),
}
# 151,936 and 151,973 take the column path (with and without a ragged tail); 5,000 has too
# few columns for k = 40 and bounds the whole row; 50 is smaller than the grid
VOCABS = [151_936, 151_973, 5_000, 50]


def verify_logits(vocab, scale, seed):
    """[5, V] logits of one k = 4 verify pass: peaked (scale 4) or flat (scale 1)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((5, vocab)) * scale).astype(np.float32)


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_token_dist_matches_the_dense_reference_at_every_row(name, vocab, scale):
    sp = CONFIGS[name]
    logits = verify_logits(vocab, scale, seed=vocab + int(scale))
    want = reference.logits_to_probs(logits, sp)  # [5, V]
    for i, row in enumerate(logits):
        dist = token_dist(row, sp)
        support = np.flatnonzero(want[i])
        if dist.ids is None:
            assert np.count_nonzero(dist.probs) == len(support), i
        else:
            assert dist.ids.tolist() == support.tolist(), i  # exact token set, in id order
        assert dist.probs.dtype == np.float32
        got = dist.dense(vocab)
        assert np.array_equal(got > 0, want[i] > 0), i
        np.testing.assert_array_max_ulp(got, want[i], maxulp=4)


def test_temperature_alone_is_bitwise_the_reference():
    logits = verify_logits(151_936, 3.0, seed=5)
    sp = SamplingParams(0.8)
    assert np.array_equal(
        np.stack([token_dist(row, sp).probs for row in logits]),
        reference.logits_to_probs(logits, sp),
    )


def test_min_p_finds_its_tokens_from_the_logits_and_leaves_a_token_at_the_cut_to_the_dense_row():
    """exp(z - max z) >= min_p is min-p's own test, without the softmax's sum; a token whose
    exp(z - max z) lies within rounding of min_p is decided by the dense row, as the
    reference decides it."""
    rng = np.random.default_rng(3)
    row = (rng.standard_normal(151_936) * 3).astype(np.float32)
    sp = SamplingParams(0.7, min_p=0.05)
    t, z_max = np.float32(0.7), np.float32(row.max()) / np.float32(0.7)
    ids, _ = min_p_support(row, t, z_max, 0.05)
    assert ids.tolist() == np.flatnonzero(reference.logits_to_probs(row, sp)).tolist()
    at_cut = row.copy()
    at_cut[7] = np.float32((float(z_max) + np.log(0.05)) * 0.7)  # exp(z_7 - max z) = 0.05
    assert min_p_support(at_cut, t, z_max, 0.05) is None
    got = token_dist(at_cut, sp)
    assert got.ids.tolist() == np.flatnonzero(reference.logits_to_probs(at_cut, sp)).tolist()


@pytest.mark.parametrize("vocab", [151_936, 300])
def test_top_k_ties_keep_exactly_k_lowest_ids(vocab):
    """Tie rule: of the tokens tied at the k-th largest value, the lowest ids are kept (the
    reference keeps exactly k too, but which of the tied ones was argpartition's choice)."""
    row = np.zeros(vocab, np.float32)
    row[[vocab - 1, 9, vocab // 2]] = 3.0  # three clear winners
    tied = [5, 77, 140, vocab - 2]  # tied at the k-th value, out of order in the grid
    row[tied] = 1.0
    dist = token_dist(row, SamplingParams(1.0, top_k=5))
    assert dist.ids.tolist() == sorted([9, vocab // 2, vocab - 1, 5, 77])
    want = reference.logits_to_probs(row, SamplingParams(1.0, top_k=5))
    assert np.count_nonzero(want) == 5
    np.testing.assert_array_max_ulp(np.sort(dist.probs), np.sort(want[want > 0]), maxulp=4)


@pytest.mark.parametrize("tied", [3000, 40_000])
def test_top_p_finds_its_cut_past_the_first_candidate_sets(tied):
    """A flat head of tied tokens: top-p 0.9 needs more than the first two candidate sets
    (64, then 512 tokens) hold, and keeps the lowest ids of the tie (40,000: a head past
    TOP_P_HEAD_MAX, sorted by uint64 keys)."""
    row = np.full(151_936, -30.0, np.float32)
    row[np.random.default_rng(0).choice(151_936, tied, replace=False)] = 0.0
    sp = SamplingParams(1.0, top_p=0.9)
    dist = token_dist(row, sp)
    want = reference.logits_to_probs(row, sp)
    assert dist.ids.tolist() == np.flatnonzero(want).tolist()
    assert 0.9 * tied <= len(dist.ids) <= 0.9 * tied + 1  # the mass before the last < 0.9


def peaked_rows(n: int, vocab: int, seed: int) -> np.ndarray:
    """[n, V] rows shaped like a language model's: a few dozen likely tokens far above a
    wide tail (the head within 20 nats of the peak is small)."""
    rng = np.random.default_rng(seed)
    rows = (rng.standard_normal((n, vocab)) * 2.0).astype(np.float32)
    for row in rows:
        likely = rng.choice(vocab, int(rng.integers(1, 60)), replace=False)
        row[likely] = 22.0 + 3.0 * rng.standard_normal(len(likely))
    return rows


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.99])
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_top_p_cut_from_the_tokens_near_the_peak_is_the_whole_rows(top_p, temperature):
    """Where the tokens within 20 nats of the peak decide top-p's cut (top_p_head), it is the
    dense reference's: the same tokens, the same probabilities to float32 rounding; on these
    rows the head decides nearly every cut."""
    sp = SamplingParams(temperature, top_p=top_p)
    rows = peaked_rows(24, 151_936, seed=int(100 * top_p + 10 * temperature))
    want = reference.logits_to_probs(rows, sp)
    decided = 0
    for i, row in enumerate(rows):
        t = np.float32(temperature)
        decided += top_p_head(row, t, np.float32(row.max()) / t, top_p) is not None
        dist = token_dist(row, sp)
        assert dist.ids.tolist() == np.flatnonzero(want[i]).tolist(), i
        np.testing.assert_array_max_ulp(dist.probs, want[i][dist.ids], maxulp=4)
    assert decided >= 22


def test_a_top_p_cut_the_tail_can_move_takes_the_rows_own_total():
    """Two tokens tie at the peak and top-p is 0.5: the second is kept only if the tail adds
    any mass (the mass before it, 1, must be < 0.5 x the total). The head's bounds on the
    total cannot tell; the row's own total decides, both ways."""
    sp, t = SamplingParams(1.0, top_p=0.5), np.float32(1.0)
    for tail, kept in ((-1e4, [10]), (-21.0, [10, 20])):  # weights 0, and e^-21 each
        row = np.full(151_936, tail, np.float32)
        row[[10, 20]] = 0.0
        assert top_p_head(row, t, np.float32(0.0), 0.5)[0].tolist() == kept
        assert token_dist(row, sp).ids.tolist() == kept
        assert np.flatnonzero(reference.logits_to_probs(row, sp)).tolist() == kept


def test_a_peak_that_alone_reaches_top_p_is_the_nucleus_the_lowest_of_the_tied_ids():
    """Two tokens tie at the peak (weight 1 each) over a third at e^-1, the rest 30 nats down:
    the total is about 2.37. At top-p 0.4 the peak's weight alone reaches top-p of the most the
    total can be, so the nucleus is the peak, taken without sorting the head: the lowest of
    the tied ids, as the sorted cut keeps. At 0.45 it falls short and the cut keeps both."""
    t = np.float32(1.0)
    row = np.full(151_936, -30.0, np.float32)
    row[[40, 10]] = 0.0
    row[25] = -1.0
    for top_p, kept in ((0.4, [10]), (0.45, [10, 40])):
        sp = SamplingParams(1.0, top_p=top_p)
        assert top_p_head(row, t, np.float32(0.0), top_p)[0].tolist() == kept
        assert token_dist(row, sp).ids.tolist() == kept, top_p
        assert np.flatnonzero(reference.logits_to_probs(row, sp)).tolist() == kept
        assert token_dist(row, sp).probs.tolist() == [1.0 / len(kept)] * len(kept)


def test_a_nucleus_reaching_past_the_tokens_near_the_peak_is_left_to_the_whole_row():
    """One token at the peak and the rest 21 nats below it, with 1.2e-4 of the mass between
    them: top-p 0.99995 needs ~85,000 of them, which the head (one token) does not hold;
    top-p 0.9 keeps the peak alone, which it decides."""
    t = np.float32(1.0)
    row = np.full(151_936, -21.0, np.float32)
    row[5] = 0.0
    assert top_p_head(row, t, np.float32(0.0), 0.99995) is None
    sp = SamplingParams(1.0, top_p=0.99995)
    want = np.flatnonzero(reference.logits_to_probs(row, sp)).tolist()
    assert 80_000 < len(want) < 90_000
    assert token_dist(row, sp).ids.tolist() == want
    ids, _ = top_p_head(row, t, np.float32(0.0), 0.9)
    assert ids.tolist() == [5] == token_dist(row, SamplingParams(1.0, top_p=0.9)).ids.tolist()


def test_top_p_at_float32s_extremes_is_the_whole_rows():
    """Logits of +-3e38: z's rounding (2^-20 of it) is far wider than the head's 20 nats, so
    the whole row decides (it overflowed computing the head's bound)."""
    row = np.full(151_936, -3e38, np.float32)
    row[3] = 3e38
    t = np.float32(1.0)
    assert top_p_head(row, t, np.float32(3e38), 0.9) is None
    assert token_dist(row, SamplingParams(1.0, top_p=0.9)).ids.tolist() == [3]


def test_top_p_masses_are_float64():
    """100,000 tokens of weight 0.1 and top-p 0.5: in float64 the mass before token j is
    0.1 j to 1e-10, so exactly the first 50,000 are kept; a float32 running sum drifts by
    hundreds of tokens' mass."""
    row = np.full(100_000, np.log(0.1), np.float32)
    row[0] = 0.0  # the peak: the rest weigh 0.1 each (as float32 exp rounds it)
    dist = token_dist(row, SamplingParams(1.0, top_p=0.5))
    w = np.float64(np.exp(np.float32(np.log(0.1))))
    want = 1 + int(np.ceil((0.5 * (1.0 + 99_999 * w) - 1.0) / w))  # before < 0.5 total
    assert len(dist.ids) == want


@pytest.mark.parametrize("vocab", [151_936, 151_973, 300])
def test_sample_follows_probs_on_the_column_walk(vocab):
    """Every token drawn has probability > 0 and the frequencies match p (5 standard errors
    per cell); the walk visits 64-row columns, the tail last (300 tokens: a plain CDF)."""
    rng = np.random.default_rng(1)
    probs = np.zeros(vocab, np.float32)
    n_cols = vocab // COLUMN_ROWS
    hot = [0, 1, n_cols - 1, n_cols, vocab - 1, vocab // 3]  # column edges and the tail
    probs[hot] = [0.3, 0.05, 0.15, 0.2, 0.25, 0.05]
    n = 20000
    counts = np.bincount([sample(probs, rng) for _ in range(n)], minlength=vocab)
    assert set(np.flatnonzero(counts)) <= set(hot)
    se = np.sqrt(probs * (1 - probs) / n)
    assert np.all(np.abs(counts / n - probs) <= 5 * se + 1e-12)


def test_sparse_sample_draws_the_dense_reference_token_seed_for_seed():
    logits = verify_logits(151_936, 4.0, seed=2)[0]
    dist = token_dist(logits, SamplingParams(0.8, top_k=40, top_p=0.9))
    dense = dist.dense(151_936)
    for seed in range(200):
        a = dist.sample(np.random.default_rng(seed))
        assert a == reference.sample(dense, np.random.default_rng(seed))


def test_dense_sample_agrees_with_the_reference_in_column_order():
    """The column walk is the reference inverse CDF over the tokens in column order."""
    vocab = 151_973
    probs = reference.logits_to_probs(verify_logits(vocab, 2.0, seed=4)[0], SamplingParams(1.0))
    n = vocab // COLUMN_ROWS * COLUMN_ROWS
    order = np.concatenate([np.arange(n).reshape(COLUMN_ROWS, -1).T.ravel(), np.arange(n, vocab)])
    for seed in range(100):
        j = reference.sample(probs[order], np.random.default_rng(seed))
        assert sample(probs, np.random.default_rng(seed)) == order[j]


def test_residual_on_the_support_equals_the_dense_residual():
    gen = np.random.default_rng(3)
    row = verify_logits(151_936, 4.0, seed=3)[1]
    p = token_dist(row, SamplingParams(0.9, top_k=40))
    q = gen.dirichlet(np.ones(151_936) * 0.01).astype(np.float32)
    q[p.ids[:10]] = p.probs[:10] * 2  # some tokens over-drafted, the rest under
    x = int(p.ids[3])
    for qi in (q, None):
        got = residual_dist(p, qi, x)
        want = residual(p.dense(151_936), qi, x)
        assert got.ids.tolist() == np.flatnonzero(want).tolist()
        np.testing.assert_array_max_ulp(got.dense(151_936), want, maxulp=4)


@pytest.mark.parametrize("point_mass", [False, True])
@pytest.mark.parametrize("name", ["T0.8-topk40", "T0.8-topk40-topp0.9", "T0.8"])
def test_lazy_verify_gives_the_reference_verdict_seed_for_seed(point_mass, name):
    """verify_stochastic with p as row i -> TokenDist gives the verdict the reference
    verifier gives on the dense [k+1, V] p of the same probabilities, for the same seed:
    accepted, rejected and recovered alike. A dense row (temperature alone) is drawn by the
    column walk, so there the reference is verify_stochastic on the dense p."""
    sp = CONFIGS[name]
    vocab = 151_936
    logits = verify_logits(vocab, 4.0, seed=6)
    p = np.stack([token_dist(row, sp).dense(vocab) for row in logits])  # [5, V]
    q = None
    if not point_mass:  # a draft model's q: the same transform on other logits
        q = np.stack([token_dist(row, sp).dense(vocab) for row in logits[:4] * 0.9])
    verdicts = set()
    for seed in range(60):
        draft = np.argmax(logits[:4], axis=-1).astype(np.int32)
        draft[seed % 5 : seed % 5 + 1] = seed  # at times a token p rarely or never gives
        lazy = verify_stochastic(draft, q, row_dists(logits, sp), np.random.default_rng(seed))
        if sp.top_k:
            want = reference.verify_stochastic(draft, q, p, np.random.default_rng(seed))
        else:
            full = verify_stochastic(draft, q, p, np.random.default_rng(seed))
            want = (full.n_accepted, full.tokens.tolist())
        assert (lazy.n_accepted, lazy.tokens.tolist()) == want, seed
        verdicts.add(lazy.n_accepted)
    assert len(verdicts) >= 3  # early rejections and full acceptances were both exercised


def test_lazy_verify_stops_computing_rows_at_the_first_rejection():
    p = np.zeros((5, 4), np.float32)
    p[:, 1] = 1.0
    asked = []

    def p_at(i):
        asked.append(i)
        return TokenDist(None, p[i])

    v = verify_stochastic(np.array([1, 2, 1, 1], np.int32), None, p_at, np.random.default_rng(0))
    assert (v.n_accepted, v.tokens.tolist(), asked) == (1, [1, 1], [0, 1])


# --- Gumbel-max on a large support: the likeliest tokens raced first, the rest by threshold --


def whole_race(dist: TokenDist, seed: int, position: int) -> tuple[int, float]:
    """The definition: every token of the support races, E / p in float64 (inf where p = 0;
    p: the dist's weights, its probabilities or, for temperature alone, exp(z - max z)), the
    first smallest wins, the margin is log(r2 / r1) of the two smallest."""
    ids = np.arange(dist.size) if dist.ids is None else dist.ids
    noise = exponential_noise(seed, position, ids)
    races = np.full(len(ids), np.inf)
    weights = dist.weights()
    with np.errstate(over="ignore"):  # a weight of 1e-310: inf, as the race takes it
        np.divide(noise, weights, out=races, where=weights > 0)
    j = int(np.argmin(races))
    first, second = np.partition(races, 1)[:2]
    return int(ids[j]), float(np.log(second / first))


def gumbel_rows():
    """Large supports of every shape the fast race meets: flat and peaked rows (dense, as
    temperature alone gives them), a ragged vocabulary, exp underflows (p = 0 inside a dense
    row), ties, and sparse supports (top-p and min-p over a flat row)."""
    rng = np.random.default_rng(11)
    flat = rng.standard_normal(151_936).astype(np.float32)
    yield "flat", token_dist(flat, SamplingParams(1.0))
    yield "peaked", token_dist(flat * 6, SamplingParams(0.8))
    yield "ragged", token_dist(rng.standard_normal(151_973).astype(np.float32), SamplingParams(1.0))
    yield "underflow", token_dist(flat * 40, SamplingParams(0.5))  # most p are exactly 0
    tied = np.round(flat * 2) / 2  # a few dozen distinct values: ties everywhere
    yield "ties", token_dist(tied.astype(np.float32), SamplingParams(0.3))
    yield "top-p", token_dist(flat, SamplingParams(1.0, top_p=0.9))
    yield "min-p", token_dist(flat * 2.5, SamplingParams(1.0, min_p=0.0001))  # 17,758 left
    yield "small", token_dist(flat[:16_383], SamplingParams(1.0))  # races whole
    two_bands = rng.standard_normal(2**18 + 5_000).astype(np.float32)  # Gemma's 262k and more
    yield "two-bands", token_dist(two_bands * 4, SamplingParams(0.7))
    # 200 tokens hold half the mass, 151,736 the other half: the winner is raced first about
    # half the time and its runner-up is then often in the tail (the margin's own bound)
    half = rng.uniform(1.0, 1.5, 151_936)  # distinct: the tail is not one tie with the front
    heavy = rng.choice(151_936, 200, replace=False)
    half *= 0.5 / (half.sum() - half[heavy].sum())
    half[heavy] = 0.5 / 200
    yield "half-tail", TokenDist(None, half.astype(np.float32))


GUMBEL_ROWS = dict(gumbel_rows())


@pytest.mark.parametrize("name", GUMBEL_ROWS)
def test_gumbel_max_is_the_whole_support_race_token_and_margin(name):
    """At 40 positions of two seeds the token and the margin are exactly the whole race's
    (bit for bit, ties included: the first smallest wins)."""
    dist = GUMBEL_ROWS[name]
    assert name != "underflow" or np.count_nonzero(dist.probs == 0) > len(dist.probs) // 2
    assert (name == "small") == (len(dist.probs) < RACE_FRONT_MIN)  # else the front runs first
    for seed in (3, 2**70 + 5):
        for position in range(0, 400, 10):
            want = whole_race(dist, seed, position)
            assert dist.gumbel_max_margin(seed, position) == want
            assert dist.gumbel_max(seed, position) == want[0]


def test_a_noise_blocks_tokens_and_holder_are_found_on_dense_and_sparse_supports():
    """Block c holds ids c, c + 2048, c + 4096, ...: entries (indices into the support) of
    the tokens of blocks 1 and 3, and of the tokens holding blocks' smallest noise where the
    support has them."""
    ids = np.array([3, 5, 2049, 4000, 4097, 6147])  # blocks 3, 5, 1, 1952, 1, 3
    assert sorted(tokens_of_blocks(np.array([1, 3]), ids, 6).tolist()) == [0, 2, 4, 5]
    dense = all_ids(5000)
    want = [0, 3, 2048, 2051, 4096, 4099]  # the blocks cut at the row's end
    assert sorted(tokens_of_blocks(np.array([0, 3]), dense, 5000).tolist()) == want
    holders = np.array([2, 1, 0])  # tokens 4097, 2051 (not in the support), 5
    assert sorted(holder_entries(np.array([1, 3, 5]), holders, ids, 6).tolist()) == [1, 4]
    assert holder_entries(np.array([1, 3]), np.array([6, 2]), dense, 5000).tolist() == [4099]


@pytest.mark.parametrize("position, n", [(0, 5), (60, 5), (63, 2), (64, 17), (100, 200)])
def test_a_steps_noise_offsets_are_each_positions_own(position, n):
    """A step's rows read their noise offsets from runs of positions mixed at once, within
    a run and across its seams (63 | 64, 127 | 128, ...): each row's are its position's."""
    for seed in (0, 7, 2**64 + 3):
        tokens, blocks = row_noise_offsets(seed, position, n)
        want = [noise_offsets(seed, position + i) for i in range(n)]
        assert tokens.tolist() == [int(t) for t, _ in want]
        assert blocks.tolist() == [int(b) for _, b in want]


@pytest.mark.parametrize("n", [1_000, 5_000, 151_936, 2**18, 2**18 + 1_000, 2**18 + 3 * 2048 + 7])
def test_block_maxima_hold_each_noise_blocks_largest_entry(n):
    """One strided max per band gives every block's largest entry (bands cut anywhere)."""
    row = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    blocks = block_of(np.arange(n))
    want = np.full(block_count(n), -np.inf, dtype=np.float32)
    np.maximum.at(want, blocks, row)
    assert block_count(n) == blocks.max() + 1
    assert block_maxima(row).tolist() == want.tolist()


def test_a_dense_race_reaches_further_where_the_likeliest_tokens_noise_is_high():
    """A dense race first hashes the tokens that can race below FRONT_REACH (4) races of the
    likeliest token; at positions where that token's own noise is above 4 (30, 36, 77 here)
    the reach rises to what was found, and where no second token is found (every other p
    ~1e-16: the margin's runner-up) it looks further until one is: the whole race's token
    and margin every time."""
    row = np.random.default_rng(3).standard_normal(151_936).astype(np.float32)
    row[1234] = 40.0
    dist = token_dist(row, SamplingParams(1.0))
    high = [p for p in range(80) if exponential_noise(5, p, np.array([1234]))[0] > 4.0]
    assert high == [30, 36, 77]
    for position in [*high, 31]:
        want = whole_race(dist, 5, position)
        assert dist.gumbel_max(5, position) == want[0] == 1234
        assert dist.gumbel_max_margin(5, position) == want


@pytest.mark.parametrize("vocab", [151_936, 151_973, 2**18 + 5_000])
def test_every_rows_gumbel_max_at_once_is_each_rows_own(vocab):
    """A verify pass's rows under temperature alone race in one pass (gumbel_max_rows): each
    row's token is its own race's, bit for bit, on rows of every shape in one batch (flat
    rows and a row whose likeliest token's noise lies beyond the first reach run their own
    races), at 8 positions of two seeds."""
    rng = np.random.default_rng(vocab)
    base = rng.standard_normal((5, vocab)).astype(np.float32)
    rows = base * np.array([1.0, 4.0, 8.0, 12.0, 1.0], dtype=np.float32)[:, None]
    rows[4, 1234] = 40.0  # every other p ~1e-16: its race looks further at some positions
    sp = SamplingParams(0.8)
    for seed in (3, 2**70 + 5):
        for position in range(0, 80, 10):
            own = [token_dist(r, sp).gumbel_max(seed, position + i) for i, r in enumerate(rows)]
            assert gumbel_max_rows(rows, sp, seed, position).tolist() == own
            assert row_dists(rows, sp).gumbel_maxes(seed, position).tolist() == own
    small = rows[:, :16_000]  # each row races whole
    own = [token_dist(r, sp).gumbel_max(3, i) for i, r in enumerate(small)]
    assert row_dists(small, sp).gumbel_maxes(3, 0).tolist() == own


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(0.8),
        SamplingParams(0.8, min_p=0.05),
        SamplingParams(0.8, top_k=40),
        SamplingParams(0.8, top_k=40, top_p=0.9),
    ],
)
def test_a_row_holding_nan_is_refused_alone_and_among_a_steps_rows(sp):
    """Column and block maxima pass NaN over (np.fmax): a row holding one is refused, by
    token_dist and by a step's rows at once, with the error that names it (top-k drew from
    the rest of such a row)."""
    rows = np.random.default_rng(2).standard_normal((3, 151_936)).astype(np.float32)
    rows[1, 70_000] = np.nan
    want = "the model's logits hold NaN, so no token can be drawn; the model file or its "
    for call in (lambda: token_dist(rows[1], sp), lambda: row_dists(rows, sp).gumbel_maxes(1, 0)):
        with pytest.raises(SamplingParamsError) as caught:
            call()
        assert str(caught.value).startswith(want)


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(0.8, top_p=0.9),
        SamplingParams(0.7, min_p=0.05),
        SamplingParams(1.0, top_p=0.8, min_p=0.02),
        SamplingParams(0.8, top_k=20_000, top_p=0.95),
    ],
)
def test_every_rows_top_p_and_min_p_token_at_once_is_each_rows_own(sp):
    """Under top-p and min-p (and a top-k too large to batch) a verify pass's supports race
    in one hash call where they are small; a flat row's large support races on its own.
    Each row's token is its own race's, bit for bit, at 8 positions of two seeds."""
    rng = np.random.default_rng(11)
    rows = rng.standard_normal((5, 151_936)).astype(np.float32)
    rows *= np.array([0.1, 4.0, 2.0, 1.0, 3.0], dtype=np.float32)[:, None]  # row 0 flat
    rows[2, rng.choice(151_936, 40, replace=False)] += 30.0  # a peaked row: a small head
    rows[4, 99] = 40.0
    dists = [token_dist(r, sp) for r in rows]
    assert min(d.size for d in dists) < 2_000 and max(d.size for d in dists) > 16_384
    for seed in (3, 2**70 + 5):
        for position in range(0, 80, 10):
            own = [d.gumbel_max(seed, position + i) for i, d in enumerate(dists)]
            assert row_dists(rows, sp).gumbel_maxes(seed, position).tolist() == own


def test_a_token_beyond_the_first_reach_wins_where_the_likeliest_tokens_noise_is_high():
    """At (seed 5, position 30) the likeliest token's race is 5.56, beyond the first reach
    of 4: a token whose block's smallest noise is its own and whose weight puts its race at
    4.5 is not hashed in the first round, and wins. One row's race, the rows' race at once
    and the race of the row's 4,096 largest logits (spare_gumbel_maxes) all find it."""
    row = np.random.default_rng(3).standard_normal(151_936).astype(np.float32)
    row[1234] = 40.0
    e_min, holder = block_min_noise(5, 30, all_ids(2048))
    token = int(block_tokens(np.array([777]), holder[[777]])[0])
    row[token] = np.float32(40.0 + math.log(e_min[777] / 4.5))
    sp = SamplingParams(1.0)
    assert whole_race(token_dist(row, sp), 5, 30)[0] == token
    assert token_dist(row, sp).gumbel_max(5, 30) == token
    assert gumbel_max_rows(row[None], sp, 5, 30).tolist() == [token]
    values, ids = largest(row[None], 4_096)
    assert spare_gumbel_maxes(values, ids, 151_936, sp, 5, 30).tolist() == [token]


@pytest.mark.parametrize("vocab", [151_936, 151_973])
def test_every_rows_top_k_token_at_once_is_each_rows_own(vocab):
    """Under top-k (with top-p and min-p cuts too) a verify pass's rows find their top k in
    one reduction each and race their supports in one hash call: each row's token is its own
    race's, bit for bit, ties included (a few dozen distinct logits: top-k keeps the lowest
    ids), and where k is too large for the grid (1,000) row by row."""
    rng = np.random.default_rng(vocab)
    rows = rng.standard_normal((5, vocab)).astype(np.float32)
    rows *= np.array([1.0, 3.0, 6.0, 1.0, 0.5], dtype=np.float32)[:, None]
    rows[3] = np.round(rows[3] * 2) / 2  # ties everywhere
    for sp in (SamplingParams(0.8, top_k=40), SamplingParams(0.8, top_k=40, top_p=0.9),
               SamplingParams(1.2, top_k=1), SamplingParams(0.7, top_k=500, min_p=0.05),
               SamplingParams(1.0, top_k=1_000)):  # fmt: skip
        for seed, position in ((3, 0), (2**70 + 5, 41), (9, 1_000)):
            own = [token_dist(r, sp).gumbel_max(seed, position + i) for i, r in enumerate(rows)]
            assert row_dists(rows, sp).gumbel_maxes(seed, position).tolist() == own
    # exactly k tokens stand out, each the peak of its own column: the k-th largest column
    # peak is the bound, and each of the k wins at some position
    rows = rng.standard_normal((5, vocab)).astype(np.float32)
    rows[:, :4] = np.array([10.0, 10.01, 10.02, 10.03], dtype=np.float32)
    sp = SamplingParams(1.0, top_k=4)
    won = set()
    for position in range(0, 100, 5):
        own = [token_dist(r, sp).gumbel_max(7, position + i) for i, r in enumerate(rows)]
        assert row_dists(rows, sp).gumbel_maxes(7, position).tolist() == own
        won.update(own)
    assert won == {0, 1, 2, 3}


def test_rows_top_k_probabilities_at_once_are_each_rows_top_k_dist_bit_for_bit():
    """top_k_probs over a step's rows (top_k_rows_of: the host's top k or the device's) gives each
    row top_k_dist's probabilities, bit for bit, 0 where top-p or min-p cut: 300 random
    cases, k 1..1,024, with ties (half-integer z) at top-p's and min-p's edges; and where the
    mass before a token is top_p's limit exactly (four equal weights at top_p 0.5: two kept)."""
    equal = top_k_probs(np.zeros((2, 4), dtype=np.float32), SamplingParams(1.0, 4, 0.5))
    assert equal.tolist() == [[0.5, 0.5, 0.0, 0.0]] * 2
    rng = np.random.default_rng(12)
    for case in range(300):
        n, k = int(rng.integers(1, 9)), int(rng.choice([1, 2, 5, 13, 40, 128, 1_024]))
        sp = SamplingParams(
            float(rng.choice([0.3, 0.8, 1.5])),
            top_k=k,
            top_p=float(rng.choice([1.0, 0.5, 0.9, 0.999])),
            min_p=float(rng.choice([0.0, 0.05, 0.2])),
        )
        z = (rng.standard_normal((n, k)) * rng.choice([0.5, 2.0, 6.0])).astype(np.float32)
        if case % 3 == 0:
            z = np.round(z * 2) / 2
        ids = np.sort(np.stack([rng.choice(151_936, k, replace=False) for _ in range(n)]))
        probs = top_k_probs(z, sp)
        for i in range(n):
            own = top_k_dist(ids[i], z[i], sp)
            dense = np.zeros(k, dtype=np.float32)
            dense[np.searchsorted(ids[i], own.token_ids())] = own.probs
            assert dense.tobytes() == probs[i].tobytes(), (case, i, sp)


def largest(rows: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's m + 1 largest logits with their columns, in no order (as llama.cpp's
    backend top-k sampler hands them over): shuffled, so no rule leans on a partition's."""
    top = np.argpartition(-rows, m, axis=1)[:, : m + 1]
    top = np.random.default_rng(m).permuted(top, axis=1)
    return np.take_along_axis(rows, top, 1), top


def test_a_rows_gumbel_max_token_from_its_largest_logits_is_its_own_where_decided():
    """spare_gumbel_maxes from each row's 4,096 largest logits and a spare: where it decides
    a row, the token is token_dist's own Gumbel-max token (every column raced), at 20
    positions of two seeds; peaked rows (a few tokens far above the rest, ties among them)
    are decided every time, a flat row (standard normal logits) never: a column left out
    could win there."""
    rng = np.random.default_rng(13)
    rows = rng.standard_normal((5, 151_936)).astype(np.float32)
    for r in (1, 2, 3):  # peaked: the spare ~20 nats under the peak
        rows[r] *= 0.5
        spikes = rng.uniform(18, 24, 30).astype(np.float32)
        rows[r, rng.choice(151_936, 30, replace=False)] += spikes
    rows[3, :10] = rows[3].max()  # ties at the top: the lowest id wins a tied race
    rows[4] = np.round(rows[2] * 4) / 4
    values, ids = largest(rows, 4_096)
    sp = SamplingParams(1.0)
    decided = np.zeros(5, dtype=int)
    for seed in (5, 2**70 + 1):
        for position in range(0, 200, 10):
            got = spare_gumbel_maxes(values, ids, 151_936, sp, seed, position)
            for i, token in enumerate(got.tolist()):
                if token >= 0:
                    decided[i] += 1
                    assert token == token_dist(rows[i], sp).gumbel_max(seed, position + i)
    assert decided.tolist() == [0, 40, 40, 40, 40]


def test_min_p_from_a_rows_largest_logits_is_token_dists_bit_for_bit_where_decided():
    """spare_min_p_dist: where it decides a row, token_dist's support and probabilities bit
    for bit; None where the spare reaches min-p's cut (a flat row at min-p 0.05; at 0.2 and
    T 0.7 its spare lies below the cut, and it is decided), and under top-p (its nucleus
    needs the row's total)."""
    rng = np.random.default_rng(14)
    rows = rng.standard_normal((6, 151_936)).astype(np.float32)
    for r in range(1, 6):
        rows[r] *= 0.5
        spikes = rng.uniform(8, 20, 50).astype(np.float32)
        rows[r, rng.choice(151_936, 50, replace=False)] += spikes
    values, ids = largest(rows, 4_096)
    for sp, flat_decided in ((SamplingParams(1.0, min_p=0.05), False),
                             (SamplingParams(0.7, min_p=0.2), True)):  # fmt: skip
        got = [spare_min_p_dist(values[i], ids[i], sp) for i in range(6)]
        assert [d is not None for d in got] == [flat_decided] + [True] * 5, sp
        for row, d in zip(rows, got):
            if d is not None:
                own = token_dist(row, sp)
                assert d.token_ids().tolist() == own.token_ids().tolist()
                assert d.probs.tobytes() == own.probs.tobytes()
    sp = SamplingParams(1.0, top_p=0.9, min_p=0.02)
    assert all(spare_min_p_dist(values[i], ids[i], sp) is None for i in range(6))


def test_min_p_rows_at_once_are_each_rows_own_and_race_to_its_own_token():
    """spare_min_p_supports over rows whose supports hold 1 to ~300 tokens (a float32 sum's
    rounding follows its length: each row is normalized alone), and a flat row it cannot
    decide: each decided row's ids and probabilities are token_dist's bit for bit, and
    spare_rows races every row to token_dist's own Gumbel-max token (the flat one from its
    logits), at 20 positions of two seeds."""
    rng = np.random.default_rng(15)
    rows = rng.standard_normal((6, 151_936)).astype(np.float32)
    for r, spikes in zip(range(1, 6), (1, 3, 9, 40, 300)):
        rows[r] *= 0.5
        rows[r, rng.choice(151_936, spikes, replace=False)] += rng.uniform(14, 17, spikes)
    values, ids = largest(rows, 4_096)
    sp = SamplingParams(0.9, min_p=0.05)
    decided, sizes, kept_ids, probs = spare_min_p_supports(values, ids, sp)
    assert decided.tolist() == [False] + [True] * 5
    ends = np.cumsum(sizes)
    for i in range(1, 6):
        own = token_dist(rows[i], sp)
        assert kept_ids[ends[i] - sizes[i] : ends[i]].tolist() == own.token_ids().tolist()
        assert probs[ends[i] - sizes[i] : ends[i]].tobytes() == own.probs.tobytes()
    assert sizes[0] == 0 and sizes[1:].min() >= 1 and sizes.max() > 100
    found = Columns(values, ids)
    for seed in (3, 2**70 + 1):
        for position in range(0, 200, 10):
            got = spare_rows(found, lambda i: rows[i], 151_936, sp).gumbel_maxes(seed, position)
            own = [token_dist(r, sp).gumbel_max(seed, position + i) for i, r in enumerate(rows)]
            assert got.tolist() == own


def test_top_p_from_a_rows_largest_logits_is_token_dists_where_decided():
    """SpareNuclei at T 1.0, top-p 0.9, from each row's 4,096 largest logits and a spare: a
    flat row's nucleus may reach past them (undecided); peaked rows' nuclei are decided
    (token_dist's ids and probabilities bit for bit) or, where the total's bounds straddle a
    token, their edge is not but their Gumbel race is (the winner is always kept and ahead
    by a margin). A cut through tied tokens (twenty at one logit) is left to the row's logits:
    the lowest ids go first there. Every decided token, and every token spare_rows gives (the
    flat and tied rows from their logits), is token_dist's own, at 20 positions of two seeds."""
    rng, other = np.random.default_rng(16), np.random.default_rng(17)
    rows = np.vstack([rng.standard_normal((6, 151_936)), other.standard_normal((1, 151_936))])
    rows = rows.astype(np.float32)
    for r, (spikes, low, high) in enumerate(
        [(3, 20, 24), (30, 16, 20), (200, 14, 18), (30, 12, 16), (300, 10, 14)], start=1
    ):
        rows[r] *= 0.5
        rows[r, rng.choice(151_936, spikes, replace=False)] += rng.uniform(low, high, spikes)
    rows[6] *= 0.5
    rows[6, other.choice(151_936, 20, replace=False)] = 20.0
    values, ids = largest(rows, 4_096)
    sp = SamplingParams(1.0, top_p=0.9)
    nuclei = SpareNuclei(values, ids, 151_936, sp)
    assert nuclei.usable.tolist() == [False] + [True] * 5 + [False]
    assert (nuclei.least == nuclei.most).tolist()[:6] == [False, True, True, False, True, False]
    for i in (1, 2, 4):
        own, got = token_dist(rows[i], sp), nuclei.dist(i)
        assert got is not None and got.token_ids().tolist() == own.token_ids().tolist()
        assert got.probs.tobytes() == own.probs.tobytes()
    assert_supports_are_each_rows(nuclei, rows, sp)
    cut = SamplingParams(1.0, top_p=0.9, min_p=0.2)  # min-p cuts inside the nuclei
    assert_supports_are_each_rows(SpareNuclei(values, ids, 151_936, cut), rows, cut)
    assert len(token_dist(rows[2], cut).token_ids()) < len(token_dist(rows[2], sp).token_ids())
    assert nuclei.dist(0) is None and nuclei.dist(3) is None and nuclei.dist(6) is None
    assert len(token_dist(rows[6], sp).token_ids()) == 19  # the cut splits the twenty
    found = Columns(values, ids)
    for seed in (3, 2**70 + 1):
        for position in range(0, 200, 10):
            own = [token_dist(r, sp).gumbel_max(seed, position + i) for i, r in enumerate(rows)]
            assert nuclei.gumbel_maxes(seed, position).tolist() == [-1, *own[1:6], -1]
            got = spare_rows(found, lambda i: rows[i], 151_936, sp).gumbel_maxes(seed, position)
            assert got.tolist() == own


def test_a_nucleus_is_ordered_from_its_rows_heaviest_columns_alone():
    """SpareNuclei orders only a row's columns above a weight floor (NUCLEUS_FLOORS) where
    they hold its nucleus: 110 spikes within a nat of each other (top-p 0.9 keeps 85), 3
    (it keeps all 3: the edge is the first token under the floor), a peak over a shoulder of
    1,500 tokens 8 nats under it (the second floor: 1,501 columns, 785 kept), each
    decided, token_dist's ids and probabilities bit for bit. A flat row beside them (no
    floor holds its nucleus) has every row's columns ordered, with the same nuclei."""
    rng = np.random.default_rng(19)
    rows = (rng.standard_normal((4, 151_936)) * 0.5).astype(np.float32)
    for r, spikes, low, high in ((0, 110, 22, 23), (1, 3, 22, 23), (2, 1_500, 14.5, 15.5)):
        rows[r, rng.choice(151_936, spikes, replace=False)] += rng.uniform(low, high, spikes)
    rows[2, 7], rows[3] = 23.0, rows[3] * 2.0
    values, ids = largest(rows, 4_096)
    sp = SamplingParams(1.0, top_p=0.9)
    heavy = SpareNuclei(values[:3], ids[:3], 151_936, sp)
    every = SpareNuclei(values, ids, 151_936, sp)
    assert heavy.sizes.tolist() == [110, 3, 1_501] and every.sizes.tolist() == [4_097] * 4
    for nuclei in (heavy, every):
        assert nuclei.most[:3].tolist() == [85, 3, 785] and nuclei.usable[:3].all()
        for i, row in enumerate(rows[:3]):
            own, got = token_dist(row, sp), nuclei.dist(i)
            assert got is not None and got.token_ids().tolist() == own.token_ids().tolist()
            assert got.probs.tobytes() == own.probs.tobytes()
    assert every.dist(3) is None
    assert_supports_are_each_rows(every, rows, sp)


def assert_supports_are_each_rows(nuclei: SpareNuclei, rows: np.ndarray, sp: SamplingParams):
    """SpareNuclei.supports, all rows at once, is each decided row's token_dist bit for bit
    (ids and probabilities), and holds nothing of the others."""
    sizes, ids, probs = nuclei.supports
    ends = np.cumsum(sizes)
    for i, row in enumerate(rows):
        at = slice(ends[i] - sizes[i], ends[i])
        if nuclei.dist(i) is None:
            assert sizes[i] == 0
            continue
        own = token_dist(row, sp)
        assert (
            ids[at].tolist() == own.token_ids().tolist()
            and probs[at].tobytes() == own.probs.tobytes()
        )


def test_the_spare_rules_read_the_columns_in_any_order():
    """llama.cpp hands a row's largest logits over in no order: each spare rule gives the
    same tokens, supports and probabilities, bit for bit, whether the columns come largest
    first, smallest first (the spare first) or shuffled, on peaked rows with and without a
    flat one (top-p orders every column, or those above a floor); top-k 40 from 41 columns
    reads the logits of the one row whose 40th and 41st logits tie, and no other."""
    rng = np.random.default_rng(21)
    rows = (rng.standard_normal((5, 151_936)) * 0.5).astype(np.float32)
    for r, spikes in zip(range(1, 5), (2, 20, 200, 2_000)):
        rows[r, rng.choice(151_936, spikes, replace=False)] += rng.uniform(10, 22, spikes)
    rows[0] *= 4.0
    top = np.sort(rows[2])[::-1]
    rows[2][rows[2] == top[40]] = top[39]  # the 41st ties with the 40th

    def outcomes(columns: int, order: str, first: int) -> list:
        values, ids = largest(rows[first:], columns - 1)
        at = np.argsort(values, axis=1, kind="stable")  # smallest first
        at = {"largest": at[:, ::-1], "smallest": at, "shuffled": np.argsort(at, axis=1)}[order]
        values, ids = np.take_along_axis(values, at, 1), np.take_along_axis(ids, at, 1)
        alone, min_p = SamplingParams(1.0), SamplingParams(0.9, min_p=0.05)
        top_p, top_k = SamplingParams(1.0, top_p=0.9), SamplingParams(0.8, top_k=40)
        nuclei = SpareNuclei(values, ids, 151_936, top_p)
        read: list[int] = []

        def read_row(i: int) -> np.ndarray:
            read.append(i)
            return rows[first + i]

        top = top_k_of_candidates(Columns(values, ids), read_row, top_k)
        assert top is not None and read == ([2 - first] if columns == 41 else [])
        got = [spare_gumbel_maxes(values, ids, 151_936, alone, 3, p) for p in range(0, 50, 10)]
        got += [*spare_min_p_supports(values, ids, min_p), *nuclei.supports, nuclei.usable]
        got += [top.gumbel_maxes(3, 0), *(top(i).ids for i in range(top.n))]
        return [x.tobytes() for x in (*got, *(top(i).probs for i in range(top.n)))]

    for columns, first in ((4_097, 0), (4_097, 1), (41, 0)):
        assert outcomes(columns, "largest", first) == outcomes(columns, "smallest", first)
        assert outcomes(columns, "largest", first) == outcomes(columns, "shuffled", first)


def test_a_nucleus_edge_the_spare_leaves_open_decides_the_races_it_cannot_change():
    """Top-p 0.5 on a row of two peaks, a shoulder of 40 tokens and a wide background: the
    tokens left out may weigh enough to move the cut by one shoulder token (least 19, most
    20). The race is decided wherever its winner is always kept (token_dist's own token),
    and left to the row where the winner is that edge token: 5 positions of 100."""
    rng = np.random.default_rng(18)
    row = (rng.standard_normal(151_936) * 1.5).astype(np.float32)
    at = rng.choice(151_936, 42, replace=False)
    row[at[:2]] = 15.0 + rng.uniform(0, 0.1, 2)
    row[at[2:]] = rng.uniform(13.9, 14.1, 40)
    values, ids = largest(row[None], 4_096)
    sp = SamplingParams(1.0, top_p=0.5)
    nuclei = SpareNuclei(values, ids, 151_936, sp)
    assert (nuclei.usable[0], nuclei.least[0], nuclei.most[0]) == (True, 19, 20)
    own = token_dist(row, sp)
    got = [int(nuclei.gumbel_maxes(7, position)[0]) for position in range(100)]
    assert sum(token < 0 for token in got) == 5
    assert all(token in (-1, own.gumbel_max(7, p)) for p, token in enumerate(got))


def test_rows_raced_at_once_refuse_a_temperature_that_overflows_as_one_row_does():
    rows = np.zeros((2, 151_936), dtype=np.float32)
    rows[1, 5] = 3e38
    sp = SamplingParams(0.5)
    with pytest.raises(SamplingParamsError) as one:
        token_dist(rows[1], sp)
    with pytest.raises(SamplingParamsError) as every:
        gumbel_max_rows(rows, sp, 1, 0)
    assert str(every.value) == str(one.value)


def test_the_threshold_finds_winners_outside_the_likeliest_tokens():
    """On a flat row the winner is mostly not among the 256 likeliest tokens raced first:
    the noise blocks' threshold is what finds it, and finds the whole race's token every
    time."""
    dist = GUMBEL_ROWS["flat"]
    front, _ = upper_set(dist.probs, 256, np.float32(1.0))
    outside = 0
    for position in range(60):
        token = dist.gumbel_max(7, position)
        assert token == whole_race(dist, 7, position)[0]
        outside += token not in set(front.tolist())
    assert outside >= 40


def test_gumbel_max_on_a_large_support_follows_p():
    """5 tokens hold 0.8 of the mass and 20,000 share 0.2 (the tail races by threshold):
    across 4,000 positions each cell, and the tail's total, within 5 standard errors."""
    head = np.array([0.3, 0.2, 0.15, 0.1, 0.05])
    probs = np.concatenate([head, np.full(20_000, 0.2 / 20_000)]).astype(np.float32)
    dist = TokenDist(None, probs / probs.sum())
    n = 4_000
    tokens = np.array([dist.gumbel_max(21, i) for i in range(n)])
    cells = np.append(np.bincount(tokens, minlength=5)[:5], np.count_nonzero(tokens >= 5)) / n
    want = np.append(head, 0.2)
    assert np.all(np.abs(cells - want) <= 5 * np.sqrt(want * (1 - want) / n))


def test_gumbel_max_of_a_temperature_alone_row_follows_its_softmax():
    """Temperature alone keeps the row (ScaledRow) and races exp(z - max z): 5 tokens hold
    0.8 of softmax(row / 0.7) and 20,000 share 0.2; across 4,000 positions each cell, and
    the tail's total, within 5 standard errors."""
    head = np.array([0.3, 0.2, 0.15, 0.1, 0.05])
    p = np.concatenate([head, np.full(20_000, 0.2 / 20_000)])
    dist = token_dist((0.7 * np.log(p)).astype(np.float32), SamplingParams(0.7))
    assert dist.scaled is not None
    n = 4_000
    tokens = np.array([dist.gumbel_max(23, i) for i in range(n)])
    cells = np.append(np.bincount(tokens, minlength=5)[:5], np.count_nonzero(tokens >= 5)) / n
    want = np.append(head, 0.2)
    assert np.all(np.abs(cells - want) <= 5 * np.sqrt(want * (1 - want) / n))


def test_gumbel_verify_on_vocabulary_rows_emits_the_whole_race_at_every_position():
    """A k = 4 pass of temperature-alone rows (V = 151,936): the draft is the target's own
    tokens with one changed at position j; every emitted token is the whole race's, and the
    draft is kept exactly up to j."""
    logits = verify_logits(151_936, 2.0, 5)
    rows = row_dists(logits, SamplingParams(0.9))
    target = [whole_race(rows(i), 9, 50 + i)[0] for i in range(5)]
    for j in range(5):
        draft = np.array(target[:4], np.int32)
        if j < 4:
            draft[j] = (draft[j] + 1) % 151_936
        verdict = verify_gumbel(draft, rows, 9, 50)
        assert verdict.n_accepted == j
        assert verdict.tokens.tolist() == target[: j + 1]


def test_a_token_of_probability_zero_never_races_even_with_zero_noise():
    """E = 0 (a counter whose 53 top bits are all ones rounds u to 1) over p = 0 is inf,
    not NaN, which argmin would have taken."""
    races = divide_races(np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.5, 0.25], np.float32))
    assert races.tolist() == [np.inf, 0.0, 4.0]
