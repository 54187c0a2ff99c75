"""The controller's choice is a pure function of the cost curve and acceptance estimates."""

from edgespec.controller import AdaptivePolicy, CostCurve, best_choice, expected_tokens
from edgespec.engine import SpeculativeDecoder
from tests.fakes import FakeRuntime, ScriptedDrafter


def test_expected_tokens():
    assert expected_tokens([]) == 1.0
    assert expected_tokens([1.0, 1.0]) == 3.0
    assert expected_tokens([0.5, 0.5]) == 1.75


def test_memory_bound_curve_drafts_long():
    flat = CostCurve([1.0] * 9, draft_s=0.05)  # GPU-like: 9 tokens cost what 1 does
    choice = best_choice(flat, [0.8] * 8, None, 0, k_max=8)
    assert (choice.drafter, choice.k) == ("model", 8)


def test_linear_curve_with_expensive_draft_turns_the_model_off():
    linear = CostCurve([float(n) for n in range(1, 10)], draft_s=0.7)  # 2-core CPU-like
    choice = best_choice(linear, [0.95] * 8, None, 0, k_max=8)
    assert (choice.drafter, choice.k) == (None, 0)


def test_free_drafter_k_grows_with_acceptance():
    concave = CostCurve([1 + 0.5 * (n - 1) for n in range(1, 10)])
    ks = [best_choice(concave, None, a, 8, k_max=8).k for a in (0.2, 0.6, 0.8, 0.95)]
    assert ks[0] == 0
    assert ks == [0, 1, 2, 5]  # maxima of E(k) / (1 + k/2), worked out by hand


def test_ngram_k_is_capped_by_what_the_match_offers():
    flat = CostCurve([1.0] * 9)
    assert best_choice(flat, None, 0.9, 3, k_max=8).k == 3


def test_a_draft_model_far_behind_pays_its_catch_up_first():
    """ONNX-like CPU curve, draft 0.45x: at 90% acceptance the model beats plain when in
    step, not when it must first forward 40 tokens it missed while prompt lookup ran."""
    curve = CostCurve([1.0, 1.1, 1.4, 1.6, 1.9, 2.2, 2.4, 2.6, 3.0], draft_s=0.45)
    in_step = best_choice(curve, [0.9] * 8, None, 0, k_max=8)
    assert in_step.drafter == "model"
    policy = AdaptivePolicy(curve, k_max=8)

    class Behind:
        def behind(self, context):
            return len(context) - 10

    catch_up = policy.catch_up_cost(Behind(), list(range(50)))  # 40 tokens behind
    assert catch_up == 0.45 * curve.target(40)  # beyond the curve: extended linearly
    assert policy.catch_up_cost(Behind(), list(range(12))) == 0.0  # one step's re-forward
    behind = best_choice(curve, [0.9] * 8, None, 0, k_max=8, model_catch_up_s=catch_up)
    assert (behind.drafter, behind.k) == (None, 0)


def test_a_far_behind_draft_model_is_not_probed():
    from edgespec.sampling import SamplingParams

    curve = CostCurve([1.0, 1.1, 1.4, 1.6, 1.9, 2.2, 2.4, 2.6, 3.0], draft_s=0.45)
    policy = AdaptivePolicy(curve, k_max=8, probe_every=1)

    class Model:
        name = "model"

        def behind(self, context):
            return len(context) - 10

    model = Model()
    policy.begin({"model": model})
    policy.model_alphas = [0.3] * 8  # plain beats it: only a probe would run it
    for _ in range(2):
        policy.observe(None, 0, 0, 0.0, 1.0)  # idle steps: a probe is due
    assert policy.plan(list(range(50)), SamplingParams()) == (None, 0)  # 40 tokens behind
    assert policy.plan(list(range(12)), SamplingParams()) == (model, 2)  # in step: probed


class WrongModel(ScriptedDrafter):
    name = "model"


def test_always_wrong_drafter_falls_back_to_plain_and_reprobes():
    rt = FakeRuntime(n_vocab=16, n_ctx=600, seed=1)
    rt.eog = 999
    flat = CostCurve([1.0] * 9, draft_s=0.05)  # speculation would pay if drafts were right
    policy = AdaptivePolicy(flat, k_max=8, probe_every=16, max_probe_every=64)
    # A fixed curve: the fake runtime's wall times must not move the estimates.
    policy.curve.smoothing = 0.0
    dec = SpeculativeDecoder(rt, [WrongModel(FakeRuntime(n_vocab=16), wrong_at=0)], policy)
    out = dec.generate([1, 2, 3], max_tokens=400)
    steps = out.stats
    drafted_steps = steps.n_drafts
    # Estimates start at 0.6 and fall 30% per failure: a handful of steps before plain wins,
    # then one probe per interval (16, 32, 64, 64, ...).
    assert steps.n_plain_steps > 0
    assert 5 <= drafted_steps <= 20, drafted_steps
    assert policy.interval["model"] == 64
    assert out.tokens == SpeculativeDecoder(rt).generate([1, 2, 3], max_tokens=400).tokens


def test_model_drafter_that_cannot_win_is_never_probed():
    rt = FakeRuntime(n_vocab=16, n_ctx=600, seed=1)
    rt.eog = 999
    cpu = CostCurve([float(n) for n in range(1, 10)], draft_s=0.7)  # loses even at 100%
    policy = AdaptivePolicy(cpu, k_max=8)
    policy.curve.smoothing = 0.0
    dec = SpeculativeDecoder(rt, [WrongModel(FakeRuntime(n_vocab=16), wrong_at=None)], policy)
    out = dec.generate([1, 2, 3], max_tokens=200)
    assert out.stats.n_drafts == 0
