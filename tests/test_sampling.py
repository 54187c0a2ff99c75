import numpy as np
import pytest

from edgespec.errors import SamplingParamsError
from edgespec.sampling import (
    SamplingParams,
    TokenDist,
    block_min_noise,
    block_of,
    block_tokens,
    exponential_noise,
    request_params,
    sample,
    slot_of,
)
from tests.fakes import logits_to_probs


def test_temperature_softmax():
    probs = logits_to_probs(np.log(np.array([1.0, 2.0, 1.0])), SamplingParams(temperature=1.0))
    assert probs.dtype == np.float32
    np.testing.assert_allclose(probs, [0.25, 0.5, 0.25], rtol=1e-6)


def test_top_k_top_p_min_p_cut_the_tail():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    top_k = logits_to_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    np.testing.assert_allclose(top_k, [4 / 7, 3 / 7, 0, 0], rtol=1e-6)
    top_p = logits_to_probs(logits, SamplingParams(temperature=1.0, top_p=0.75))
    np.testing.assert_allclose(top_p, [4 / 9, 3 / 9, 2 / 9, 0], rtol=1e-6)
    min_p = logits_to_probs(logits, SamplingParams(temperature=1.0, min_p=0.6))
    np.testing.assert_allclose(min_p, [4 / 7, 3 / 7, 0, 0], rtol=1e-6)


def test_typical_p_keeps_the_tokens_nearest_the_entropy():
    """p = .4, .3, .2, .1: entropy 1.28 nats, surprises .92, 1.20, 1.61, 2.30, so the
    tokens go 1, 2, 0, 3 and typical-p keeps each while the mass before it is below the cut;
    after top-k 2 (p = 4/7, 3/7) token 0 is the nearer one."""
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    for typical_p, want in ((0.45, [0, 0.6, 0.4, 0]), (0.85, [4 / 9, 3 / 9, 2 / 9, 0])):
        got = logits_to_probs(logits, SamplingParams(temperature=1.0, typical_p=typical_p))
        np.testing.assert_allclose(got, want, rtol=1e-6)
    top_k = logits_to_probs(logits, SamplingParams(temperature=1.0, top_k=2, typical_p=0.5))
    np.testing.assert_allclose(top_k, [1, 0, 0, 0], rtol=1e-6)
    with pytest.raises(SamplingParamsError):
        SamplingParams(1.0, typical_p=0.0)


def test_rows_are_independent():
    logits = np.log(np.array([[0.5, 0.5, 0.0001], [0.1, 0.2, 0.7]]))
    probs = logits_to_probs(logits, SamplingParams(temperature=1.0, top_k=1))
    assert probs.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]


def test_sample_follows_probs():
    rng = np.random.default_rng(0)
    probs = np.array([0.0, 0.7, 0.3], np.float32)
    draws = np.bincount([sample(probs, rng) for _ in range(5000)], minlength=3) / 5000
    assert draws[0] == 0.0
    assert abs(draws[1] - 0.7) < 5 * np.sqrt(0.21 / 5000)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -1.0}, "temperature must be in [0.0, inf], got -1.0; use 0 for greedy"),
        ({"top_p": 0.0}, "top_p must be in (0.0, 1.0], got 0.0; use 1.0 to turn it off"),
        ({"min_p": 1.0}, "min_p must be in [0.0, 1.0), got 1.0; use 0.0 to turn it off"),
        ({"top_k": -3}, "top_k must be a whole number >= 0, got -3; use 0 to turn it off"),
        ({"temperature": float("nan")}, "temperature must be in [0.0, inf], got nan"),
        ({"seed": -1}, "seed must be a whole number >= 0, got -1"),
    ],
)
def test_invalid_values_are_refused(kwargs, message):
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(**kwargs)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("temperature", [1e-39, 1e-45, 4e38])
def test_temperatures_float32_cannot_hold_are_refused(temperature):
    """Logits are divided by float32(temperature): below ~1.18e-38 it is subnormal or 0 (the
    division gave NaN and always the last token), above ~3.4e38 infinite."""
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(temperature=temperature)
    assert str(e.value).startswith(f"temperature {temperature!r} is ")
    assert "in float32, which the logits are divided by; use 0 for greedy decoding" in str(e.value)


def test_a_temperature_that_overflows_the_logits_is_refused_not_sampled():
    sp = SamplingParams(temperature=1e-37)  # a normal float32, but 100 / 1e-37 is inf
    logits = np.array([100.0, 90.0, -3.0], np.float32)
    for params in (sp, SamplingParams(temperature=1e-37, top_k=2)):
        with pytest.raises(SamplingParamsError, match="overflows float32 on these logits"):
            logits_to_probs(logits, params)


def test_unknown_sampler_is_refused():
    with pytest.raises(SamplingParamsError) as e:
        SamplingParams(1.0, sampler="metropolis")
    assert str(e.value) == "unknown sampler 'metropolis'; choose one of gumbel, rejection"
    with pytest.raises(SamplingParamsError):  # "auto" was always gumbel: gone
        SamplingParams(1.0, sampler="auto")


def test_position_keyed_noise_depends_on_seed_position_and_token_only():
    ids = np.array([3, 17, 151_935])
    a = exponential_noise(7, 120, ids)
    assert a.tolist() == exponential_noise(7, 120, ids[::-1])[::-1].tolist()
    assert exponential_noise(7, 120, ids[1:]).tolist() == a[1:].tolist()  # any support
    assert not np.any(exponential_noise(7, 121, ids) == a)
    assert not np.any(exponential_noise(8, 120, ids) == a)
    assert not np.any(exponential_noise(7 + 2**64, 120, ids) == a)  # wide seeds fold in


def test_position_keyed_noise_is_exponential():
    """Exp(1) noise: the mean and the tail within 5 standard errors over 200,000 draws."""
    e = exponential_noise(1, 5, np.arange(200_000))
    assert abs(e.mean() - 1.0) <= 5 * 1.0 / np.sqrt(len(e))
    tail = (e > 3.0).mean()
    assert abs(tail - np.exp(-3.0)) <= 5 * np.sqrt(np.exp(-3.0) / len(e))


def test_a_noise_blocks_smallest_is_one_of_its_tokens_noise():
    """race_front skips a block whose smallest noise cannot win: that smallest is exactly
    the least of its 128 slots' noise, held by the slot block_min_noise names, in blocks of
    two bands (slot r of block c of band g: id g * 2**18 + r * 2048 + c), whichever support
    asks."""
    blocks = np.array([0, 1, 7, 2047, 2048, 2049, 4095])
    ids = block_tokens(blocks[:, None], np.arange(128))  # [7, 128]
    assert ids[1].tolist() == [1 + 2048 * r for r in range(128)]
    assert ids[4, 0] == 2**18 and ids[6, 127] == 2**18 + 127 * 2048 + 2047
    assert block_of(ids).tolist() == [[b] * 128 for b in blocks.tolist()]
    assert slot_of(ids).tolist() == [list(range(128))] * 7
    noise = exponential_noise(5, 9, ids.ravel()).reshape(ids.shape)
    e_min, holder = block_min_noise(5, 9, blocks)
    assert noise.min(axis=1).tolist() == e_min.tolist()
    assert noise.argmin(axis=1).tolist() == holder.tolist()
    token = int(ids[2, holder[2]])
    assert exponential_noise(5, 9, np.array([token])).tolist() == [e_min[2]]


@pytest.mark.parametrize("sparse", [False, True])
def test_gumbel_max_follows_p(sparse):
    """Across positions (independent noise) the Gumbel-max token follows p: every cell
    within 5 standard errors over 20,000 positions; a token of probability 0 never wins."""
    p = np.array([0.5, 0.0, 0.3, 0.15, 0.05], np.float32)
    dist = TokenDist(np.array([0, 2, 3, 4]), p[[0, 2, 3, 4]]) if sparse else TokenDist(None, p)
    n = 20_000
    counts = np.bincount([dist.gumbel_max(9, i) for i in range(n)], minlength=len(p))
    assert counts[1] == 0
    assert np.all(np.abs(counts / n - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_gumbel_max_margin_is_the_gap_between_the_two_best_perturbed_scores(sparse):
    """log p + g per token, g = -log E the position's noise: the winner is gumbel_max's and
    the margin is its lead over the runner-up (float64, to 1e-9)."""
    p = np.array([0.5, 0.0, 0.3, 0.15, 0.05], np.float32)
    dist = TokenDist(np.array([0, 2, 3, 4]), p[[0, 2, 3, 4]]) if sparse else TokenDist(None, p)
    for position in range(200):
        noise = exponential_noise(3, position, np.arange(len(p)))
        with np.errstate(divide="ignore"):
            scores = np.log(p.astype(np.float64)) - np.log(noise)
        second, first = np.sort(scores)[-2:]
        token, margin = dist.gumbel_max_margin(3, position)
        assert token == dist.gumbel_max(3, position) == int(np.argmax(scores))
        assert margin == pytest.approx(first - second, abs=1e-9)
    assert TokenDist(np.array([7]), np.ones(1, np.float32)).gumbel_max_margin(3, 0) == (7, np.inf)


def test_request_params_fill_a_seed_and_keep_the_sampler():
    seeded = request_params(SamplingParams(1.0, seed=4))
    assert (seeded.seed, seeded.sampler) == (4, "gumbel")
    free = [request_params(SamplingParams(1.0)) for _ in range(3)]
    assert all(f.seed is not None and f.sampler == "gumbel" for f in free)
    assert len({f.seed for f in free}) == 3
    assert request_params(SamplingParams(1.0, seed=4, sampler="rejection")).sampler == "rejection"
