"""verify_greedy on argmaxes; verify_stochastic on hand-built logits (vLLM's sampler tests)."""

import numpy as np
import pytest

from edgespec.sampling import PassRows, TokenDist
from edgespec.verify import residual, verify_greedy, verify_gumbel, verify_stochastic


def argmaxes(winners):
    """What verify_greedy reads of the rows: each one's argmax (forward_top's ids)."""
    return np.asarray(winners, np.int64)


def test_greedy_perfect_match_emits_bonus():
    v = verify_greedy(np.array([1, 2, 3], np.int32), argmaxes([1, 2, 3, 4]))
    assert v.n_accepted == 3
    assert v.tokens.tolist() == [1, 2, 3, 4]


def test_greedy_early_mismatch_emits_target_token():
    v = verify_greedy(np.array([1, 7, 3], np.int32), argmaxes([1, 2, 3, 4]))
    assert v.n_accepted == 1
    assert v.tokens.tolist() == [1, 2]


def test_greedy_first_position_mismatch():
    v = verify_greedy(np.array([6, 2], np.int32), argmaxes([1, 2, 3]))
    assert (v.n_accepted, v.tokens.tolist()) == (0, [1])


def test_greedy_empty_draft_is_plain_step():
    v = verify_greedy(np.zeros(0, np.int32), argmaxes([5]))
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


# --- every draft position: k = 3, drafts drawn from q at each position --------------------

K = 3
LAW_VOCAB = 6


def law_rows(seed=3):
    """p: [K+1, V], q: [K, V] float32, every row different (a q read from the wrong row, or
    a p, shows), q far from p so that rejections and residuals happen at every position."""
    gen = np.random.default_rng(seed)
    p = gen.dirichlet(np.ones(LAW_VOCAB), size=K + 1).astype(np.float32)
    q = gen.dirichlet(np.ones(LAW_VOCAB) * 0.4, size=K).astype(np.float32)
    return p, q


def assert_follows(counts, probs, what):
    """Every cell within 5 standard errors of its exact probability (a false failure has
    probability < 6e-7 per cell); a token of probability 0 is never emitted."""
    n = counts.sum()
    freq = counts / n
    se = np.sqrt(probs * (1 - probs) / n)
    assert np.all(np.abs(freq - probs) <= 5 * se + 1e-12), (what, n, freq, probs)


def tally_by_position(verdicts):
    """counts[i, x]: how often x was emitted at position i, among runs that reached i."""
    counts = np.zeros((K + 1, LAW_VOCAB))
    for v in verdicts:
        for i, token in enumerate(v.tokens.tolist()):
            counts[i, token] += 1
    return counts


@pytest.mark.parametrize("point_mass", [False, True])
def test_stochastic_follows_p_at_every_draft_position(point_mass):
    """Given that the drafts before it were accepted, the token emitted at draft position i
    (accepted, recovered or, at i = k, the bonus) is distributed as p[i]: draft tokens drawn
    from q[i] at every position (prompt lookup: p's likeliest token at each position). A residual
    without q, or q read from another row, at any position >= 1 fails here. N = 40,000 runs
    reach position 3 several thousand times."""
    p, q = law_rows()
    rng = np.random.default_rng(11)
    draws = np.random.default_rng(12)
    verdicts = []
    for _ in range(40_000):
        if point_mass:
            draft = p[:K].argmax(axis=1).astype(np.int32)  # likely tokens: often accepted
        else:
            draft = np.array([draws.choice(LAW_VOCAB, p=row / row.sum()) for row in q], np.int32)
        verdicts.append(verify_stochastic(draft, None if point_mass else q, p, rng))
    counts = tally_by_position(verdicts)
    assert counts[K].sum() > 1000  # the bonus position is reached often enough to judge
    for i in range(K + 1):
        assert_follows(counts[i], p[i], f"position {i}")


def test_gumbel_follows_p_at_every_draft_position():
    """The Gumbel coupling at k = 3: drafts are argmax(log q[i] + g) with the target's noise
    at each position (seeds 0..N-1), and the token emitted at each position follows p[i].
    Bound as above (5 standard errors per cell, N = 20,000)."""
    p, q = law_rows()
    verdicts = []
    for seed in range(20_000):
        draft = np.array(
            [TokenDist(None, q[i]).gumbel_max(seed, 40 + i) for i in range(K)], np.int32
        )
        rows = PassRows(K + 1, lambda i: TokenDist(None, p[i]))
        verdicts.append(verify_gumbel(draft, rows, seed, 40))
    counts = tally_by_position(verdicts)
    assert counts[K].sum() > 300
    for i in range(K + 1):
        assert_follows(counts[i], p[i], f"position {i}")


def test_gumbel_emits_the_targets_own_token_at_every_position():
    """Accepted exactly while the draft equals the target's Gumbel-max token; the first
    mismatch emits the target's token; all equal: the bonus is the target's token at row k."""
    p, q = law_rows()
    rows = PassRows(K + 1, lambda i: TokenDist(None, p[i]))
    target = [rows(i).gumbel_max(7, 100 + i) for i in range(K + 1)]
    v = verify_gumbel(np.array(target[:K], np.int32), rows, 7, 100)
    assert (v.n_accepted, v.tokens.tolist()) == (K, target)
    for wrong_at in range(K):
        draft = np.array(target[:K], np.int32)
        draft[wrong_at] = (draft[wrong_at] + 1) % LAW_VOCAB
        v = verify_gumbel(draft, rows, 7, 100)
        assert (v.n_accepted, v.tokens.tolist()) == (wrong_at, target[: wrong_at + 1])
    v = verify_gumbel(np.zeros(0, np.int32), rows, 7, 100)  # a plain step
    assert (v.n_accepted, v.tokens.tolist()) == (0, target[:1])


def test_a_drafter_that_is_the_target_is_always_accepted_under_gumbel():
    """p = q: both take the argmax of the same numbers, so every draft token is accepted
    (rejection sampling accepts it with probability sum(min(p, q)) = 1 too)."""
    p, _ = law_rows()
    rows = PassRows(K + 1, lambda i: TokenDist(None, p[i]))
    for seed in range(200):
        draft = np.array([rows(i).gumbel_max(seed, i) for i in range(K)], np.int32)
        assert verify_gumbel(draft, rows, seed, 0).n_accepted == K
