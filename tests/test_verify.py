"""verify_greedy / verify_stochastic on hand-built logits (vLLM's rejection-sampler tests)."""

import numpy as np
import pytest

from edgespec.verify import residual, verify_greedy, verify_stochastic


def one_hot_logits(winners, vocab=8):
    logits = np.zeros((len(winners), vocab), dtype=np.float32)
    logits[np.arange(len(winners)), winners] = 5.0
    return logits


def test_greedy_perfect_match_emits_bonus():
    v = verify_greedy(np.array([1, 2, 3], np.int32), one_hot_logits([1, 2, 3, 4]))
    assert v.n_accepted == 3
    assert v.tokens.tolist() == [1, 2, 3, 4]


def test_greedy_early_mismatch_emits_target_token():
    v = verify_greedy(np.array([1, 7, 3], np.int32), one_hot_logits([1, 2, 3, 4]))
    assert v.n_accepted == 1
    assert v.tokens.tolist() == [1, 2]


def test_greedy_first_position_mismatch():
    v = verify_greedy(np.array([6, 2], np.int32), one_hot_logits([1, 2, 3]))
    assert (v.n_accepted, v.tokens.tolist()) == (0, [1])


def test_greedy_empty_draft_is_plain_step():
    v = verify_greedy(np.zeros(0, np.int32), one_hot_logits([5]))
    assert (v.n_accepted, v.tokens.tolist()) == (0, [5])


def test_stochastic_seeded_runs_are_deterministic():
    rng_p = np.random.default_rng(1)
    p = rng_p.dirichlet(np.ones(8), size=4).astype(np.float32)
    q = rng_p.dirichlet(np.ones(8), size=3).astype(np.float32)
    draft = np.array([0, 1, 2], np.int32)
    a = [verify_stochastic(draft, q, p, np.random.default_rng(7)).tokens.tolist() for _ in "ab"]
    assert a[0] == a[1]


def test_stochastic_accepts_certain_tokens_and_rejects_impossible_ones():
    p = np.zeros((3, 4), np.float32)
    p[0, 1] = p[1, 3] = p[2, 0] = 1.0
    v = verify_stochastic(np.array([1, 2], np.int32), None, p, np.random.default_rng(0))
    assert (v.n_accepted, v.tokens.tolist()) == (1, [1, 3])  # p(2) = 0 at position 1


def test_residual_point_mass_removes_the_rejected_token():
    p = np.array([0.5, 0.25, 0.25], np.float32)
    assert residual(p, None, 0).tolist() == [0.0, 0.5, 0.5]
    q = np.array([0.25, 0.5, 0.25], np.float32)
    assert residual(p, q, 1).tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("point_mass", [False, True])
@pytest.mark.parametrize("n_samples", [4000, 64000])
def test_stochastic_first_token_follows_p(point_mass, n_samples):
    """The first emitted token is distributed as p[0] whatever q is. Bound: every cell within
    5 standard errors (a false failure has probability < 1e-5 per cell); the L1 error must
    shrink like 1/sqrt(N), checked by the two sample counts sharing one bound scaled by N."""
    gen = np.random.default_rng(3)
    vocab = 6
    p = gen.dirichlet(np.ones(vocab), size=3).astype(np.float32)
    q = None if point_mass else gen.dirichlet(np.ones(vocab) * 0.3, size=2).astype(np.float32)
    rng = np.random.default_rng(11)
    counts = np.zeros(vocab)
    for _ in range(n_samples):
        draft_first = 2 if q is None else int(rng.choice(vocab, p=q[0] / q[0].sum()))
        draft = np.array([draft_first, 0], np.int32)
        counts[verify_stochastic(draft, q, p, rng).tokens[0]] += 1
    freq = counts / n_samples
    se = np.sqrt(p[0] * (1 - p[0]) / n_samples)
    assert np.all(np.abs(freq - p[0]) <= 5 * se + 1e-9), (freq, p[0])
    assert np.abs(freq - p[0]).sum() < 4.0 * np.sqrt(vocab / n_samples)
