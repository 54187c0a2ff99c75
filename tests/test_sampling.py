import numpy as np
import pytest

from edgespec.errors import SamplingParamsError
from edgespec.sampling import SamplingParams, logits_to_probs, sample


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
