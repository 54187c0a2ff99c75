"""The controller's choice is a pure function of the cost curve and the priced offers, and it
knows drafters only through the protocol."""

import pytest

from edgespec.controller import (
    COLD_JUDGED,
    PROBE_BUDGET,
    STAY_MARGIN,
    TRIAL_TOKENS,
    AdaptivePolicy,
    Choice,
    CostCurve,
    FixedPolicy,
    Option,
    Shadow,
    best_choice,
    draft_rates,
    expected_tokens,
    followed,
    taught,
)
from edgespec.controller.acceptance import ByMatchLength, ByPosition
from edgespec.drafters import NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.sampling import SamplingParams
from tests.fakes import FakeRuntime, ScriptedDrafter


def offers(policy: AdaptivePolicy, context: list[int]) -> list:
    """What the engine hands the policy: each drafter's offer, in begin's order."""
    return [e.drafter.offer(context) for e in policy.estimates]


def plan(policy: AdaptivePolicy, context: list[int], sp: SamplingParams = SamplingParams()):
    return policy.plan(context, sp, offers(policy, context))


def to_sync(policy: AdaptivePolicy, context: list[int]) -> list:
    return policy.to_sync(context, offers(policy, context))


SP = SamplingParams()


def test_expected_tokens():
    assert expected_tokens([]) == 1.0
    assert expected_tokens([1.0, 1.0]) == 3.0
    assert expected_tokens([0.5, 0.5]) == 1.75


def model(token_s=0.05, **kwargs):
    return ScriptedDrafter(FakeRuntime(), None, token_s=token_s, name="model", **kwargs)


def test_memory_bound_curve_drafts_long():
    flat = CostCurve([1.0] * 9)  # GPU-like: 9 tokens cost what 1 does
    m = model()
    choice = best_choice(flat, [Option(m, [0.8] * 8, token_s=0.05)], k_max=8)
    assert (choice.drafter, choice.k) == (m, 8)


def test_a_drafter_that_cannot_win_is_not_priced(monkeypatch):
    """rate_bound: free and always right, a drafter 8 target tokens behind at k_max 8 cannot
    beat plain decoding (at most 9 tokens for at least 8 + 1 passes) and is skipped unpriced;
    7.9 behind it is priced, and wins (9 tokens for 8.9 passes). Right 20% of the time and
    in step, on a curve whose 2-token pass costs 1.33 one-token passes, it cannot win either
    (at most 1.25 tokens a step)."""
    import edgespec.controller.pricing as controller

    flat = CostCurve([1.0] * 9)
    priced = []
    real = controller.draft_rates
    monkeypatch.setattr(
        controller, "draft_rates", lambda c, o, *a: priced.append(o) or real(c, o, *a)
    )
    far, near = (Option(model(), [1.0] * 8, 0.0, catch_up_s=s) for s in (8.0, 7.9))
    assert best_choice(flat, [far], k_max=8) == Choice(None, 0, 1.0)
    assert priced == []
    assert best_choice(flat, [near], k_max=8).drafter is near.drafter
    assert priced == [near]
    steep = CostCurve([1.0, 1.33] + [1.33 + 0.2 * n for n in range(1, 8)])
    unlikely = Option(model(), [0.2] * 8, 0.0)
    assert best_choice(steep, [unlikely], k_max=8) == Choice(None, 0, 1.0)
    assert priced == [near]


@pytest.mark.parametrize("seed", range(40))
def test_the_rate_bound_holds_for_random_options(seed):
    """rate_bound is at least every rate draft_rates gives, whatever the option and curve."""
    import numpy as np

    from edgespec.controller import rate_bound

    rng = np.random.default_rng(seed)
    curve = CostCurve(np.cumsum(rng.uniform(0.0, 1.0, 9)).tolist() if seed % 2 else
                      (1.0 + rng.uniform(0.0, 0.5, 9)).tolist())  # fmt: skip
    n = int(rng.integers(1, 9))
    option = Option(
        model(), rng.uniform(0.0, 1.0, n).tolist(), float(rng.uniform(0.0, 0.5)),
        catch_up_s=float(rng.uniform(0.0, 2.0)) * (seed % 3 == 0),
        continues=rng.uniform(0.0, 1.0, n).tolist() if seed % 4 == 1 else (),
        alphas_sure=rng.uniform(0.0, 1.0, n).tolist() if seed % 4 == 1 else (),
        leaves_s=float(rng.uniform(0.0, 0.2)), first_s=float(rng.uniform(0.0, 1.0)),
    )  # fmt: skip
    switch = rng.uniform(0.0, 0.5, 10).tolist() if seed % 5 == 0 else ()
    assert max(draft_rates(curve, option, 8, switch)) <= rate_bound(curve, option, 8) + 1e-12


def test_linear_curve_with_expensive_draft_turns_the_model_off():
    linear = CostCurve([float(n) for n in range(1, 10)])  # 2-core CPU-like
    choice = best_choice(linear, [Option(model(), [0.95] * 8, token_s=0.7)], k_max=8)
    assert (choice.drafter, choice.k) == (None, 0)


def test_free_drafter_k_grows_with_acceptance():
    concave = CostCurve([1 + 0.5 * (n - 1) for n in range(1, 10)])
    d = NgramDrafter()
    ks = [best_choice(concave, [Option(d, [a] * 8, 0.0)], k_max=8).k for a in (0.2, 0.6, 0.8, 0.95)]
    assert ks == [0, 1, 2, 5]  # maxima of E(k) / (1 + k/2), worked out by hand


def test_k_is_capped_by_what_the_offer_holds():
    flat = CostCurve([1.0] * 9)
    assert best_choice(flat, [Option(NgramDrafter(), [0.9] * 3, 0.0)], k_max=8).k == 3


def test_a_draft_model_far_behind_pays_its_catch_up_first():
    """ONNX-like CPU curve, draft 0.45x: at 90% acceptance the model beats plain when in
    step, not when it must first forward 40 tokens it missed while prompt lookup ran."""
    curve = CostCurve([1.0, 1.1, 1.4, 1.6, 1.9, 2.2, 2.4, 2.6, 3.0])
    m = model(0.45)
    assert best_choice(curve, [Option(m, [0.9] * 8, 0.45)], k_max=8).drafter is m
    policy = AdaptivePolicy(curve, k_max=8)
    catch_up = policy.catch_up_cost(0.45, behind=40)
    assert catch_up == 0.45 * curve.target(40)  # beyond the curve: extended along its chord
    assert policy.catch_up_cost(0.45, behind=2) == 0.0  # one step's re-forward
    behind = best_choice(curve, [Option(m, [0.9] * 8, 0.45, catch_up)], k_max=8)
    assert (behind.drafter, behind.k) == (None, 0)


def test_a_draft_that_always_goes_on_is_priced_as_k_tokens():
    curve = CostCurve([1.0, 1.1, 1.3, 1.6])
    option = Option(model(), [0.9, 0.8, 0.7], token_s=0.4, catch_up_s=0.2)
    want = [expected_tokens([0.9, 0.8, 0.7][:k]) / (0.2 + 0.4 * k + curve.target(k + 1))
            for k in (1, 2, 3)]  # fmt: skip
    assert draft_rates(curve, option, 3) == pytest.approx(want, rel=1e-12)
    ones = Option(option.drafter, option.alphas, 0.4, 0.2, continues=[1.0, 1.0, 1.0])
    assert draft_rates(curve, ones, 3) == draft_rates(curve, option, 3)


def test_a_draft_that_may_end_early_is_priced_over_its_lengths():
    curve = CostCurve([1.0, 1.1, 1.2])
    # sure of its first token 0.6 of the time; a sure token is kept 0.95 of the time, any 0.7
    option = Option(model(), [0.7, 0.7], token_s=0.5, continues=[0.6, 0.6],
                    alphas_sure=[0.95, 0.95])  # fmt: skip
    one, two = draft_rates(curve, option, 2)
    assert one == pytest.approx(1.7 / (0.5 + 1.1))
    # 0.4 of the drafts stop at 1 token (0.5 + 1.1 s), 0.6 reach 2 (1.0 + 1.2 s); token 2 is
    # emitted when reached, the first (then sure) kept and it kept: 0.6 x 0.95 x 0.7
    assert two == pytest.approx((1 + 0.7 + 0.6 * 0.95 * 0.7) / (0.4 * 1.6 + 0.6 * 2.2))
    # a drafter that always drafts 2 reaches its second token after an unsure first one
    # too: asked for 1 here; one that stops where unsure is asked for 2
    always = Option(option.drafter, [0.7, 0.7], token_s=0.5)
    assert best_choice(curve, [always], 2).k == 1 and best_choice(curve, [option], 2).k == 2


def test_by_position_learns_acceptance_and_going_on_by_the_drafters_sureness():
    est = ByPosition(prior=0.6, smoothing=0.5)
    assert (est.alphas(0, 2), est.continues(0, 2)) == ([0.6, 0.6], [1.0, 1.0])
    est.observe(0, 2, 2, unsure_end=True)  # sure of token 1, not of token 2: both kept
    assert est.alphas_sure(0, 3) == [0.8, 0.6, 0.6]  # position 3 takes position 2's
    assert est.continues(0, 3) == [1.0, 0.5, 0.5]
    assert est.alphas(0, 2) == pytest.approx([0.8, 0.5 * 0.6 + 0.5 * 0.8])
    est.observe(0, 3, 0)  # sure of all three (the last at the cap), the first rejected
    assert est.alphas_sure(0, 3) == [0.4, 0.6, 0.6]  # later positions were never judged
    assert est.continues(0, 4) == [1.0, 0.75, 0.75, 0.75]
    # without sureness (no confidence; prompt lookup) every token counts as sure
    plain = ByPosition(prior=0.6, smoothing=0.5)
    plain.observe(0, 2, 1)
    assert plain.alphas(0, 3) == plain.alphas_sure(0, 3) == [0.8, 0.3, 0.3]
    assert plain.continues(0, 3) == [1.0, 1.0, 1.0]
    assert ByMatchLength().continues(3, 2) == [1.0, 1.0]


def test_each_request_starts_from_every_earlier_requests_outcomes_the_prior_weighted():
    est = ByPosition(prior=0.6, smoothing=0.5, prior_weight=10)
    est.observe(0, 3, 3, unsure_end=True)  # sure, sure, unsure: all kept
    est.observe(0, 2, 0)  # sure of both, the first rejected
    assert est.alphas_sure(0, 2) == [0.4, 0.8]  # within a request: the EMA
    est.next_request()
    # sure tokens: 2 kept of 3 judged; unsure: 1 of 1; went on past 4 of 5 drafted
    assert est.alphas_sure(0, 2) == [pytest.approx((2 + 6) / 13)] * 2
    assert est.continues(0, 2) == [pytest.approx((4 + 10) / 15)] * 2
    sure, unsure, goes_on = (2 + 6) / 13, (1 + 6) / 11, (4 + 10) / 15
    assert est.alphas(0, 1) == [pytest.approx(goes_on * sure + (1 - goes_on) * unsure)]
    lookup = ByMatchLength(priors=(0.2, 0.4), prior_weight=5)
    lookup.observe(2, 4, 4)
    lookup.observe(2, 4, 1)  # under match length 2: 5 kept of 6 judged
    lookup.next_request()
    assert lookup.rate(2) == pytest.approx((5 + 0.4 * 5) / 11)
    assert lookup.rate(1) == 0.2  # a key never drafted under keeps its prior
    assert lookup.rate(3) == 0.4  # ... the last prior for longer matches


def test_a_match_lengths_first_outcomes_move_its_rate_as_a_draft_models_do():
    """ByMatchLength learns a key's first outcomes at 1/(2 + n + 1) (ByPosition's cold start),
    down to its smoothing: in a process's first request a prompt lookup right every time on
    code left its 0.8 prior slowly at 0.1 a token. A later request starts from the tally,
    its prior worth 5 outcomes, and moves at 1/(2 + outcomes so far + 1)."""
    est = ByMatchLength(priors=(0.2, 0.4), smoothing=0.1, prior_weight=5)
    est.observe(2, 2, 2)  # kept, kept: 0.4 -> 0.4 + 0.6/3 -> 0.6 + 0.4/4
    assert est.rate(2) == pytest.approx(0.7)
    est.next_request()
    assert est.rate(2) == pytest.approx((2 + 0.4 * 5) / 7)
    est.observe(2, 1, 0)  # rejected, its 3rd outcome: 1/(2 + 2 + 1)
    assert est.rate(2) == pytest.approx(4 / 7 * (1 - 1 / 5))
    for _ in range(20):
        est.observe(1, 1, 1)
    est.next_request()
    before = est.rate(1)
    est.observe(1, 1, 0)  # 21 outcomes before it: the smoothing
    assert est.rate(1) == pytest.approx(before * 0.9)


def test_beyond_its_calibration_a_curve_grows_along_its_chord():
    """This CPU's ONNX Runtime calibration, widest pass below the one before it: extended
    from its last two widths, a 50-token pass cost less than nothing and a draft model 50
    tokens behind was caught up mid-request at 6 target passes a time (open 0.98x)."""
    onnx = [1.0, 1.2, 1.63, 2.1, 2.68, 3.12, 3.7, 4.23, 5.14, 5.1, 5.28, 5.9, 6.47, 6.35, 6.99]
    curve = CostCurve([*onnx, 8.17, 7.84])
    assert curve.target(17) == 7.84
    assert curve.target(50) == pytest.approx(7.84 + (7.84 - 1.0) / 16 * 33)
    assert AdaptivePolicy(curve).catch_up_cost(0.33, behind=50) > curve.target(1)
    assert CostCurve([1.0]).target(3) == 3.0  # one width: a token costs what one pass does
    assert CostCurve([1.0, 0.9]).target(4) == 0.9  # never falls beyond the calibration


def test_a_far_behind_drafter_is_not_probed():
    curve = CostCurve([1.0, 1.1, 1.4, 1.6, 1.9, 2.2, 2.4, 2.6, 3.0])
    policy = AdaptivePolicy(curve, k_max=8, probe_every=1)
    far, near = model(0.45, behind=40), model(0.45, behind=2)
    for m in (far, near):
        policy.begin([m])
        policy.estimate(m).acceptance = ByPosition(prior=0.3)  # plain beats it: only a probe
        for _ in range(2):
            policy.observe(None, 0, 0, 0.0, 1.0)  # idle steps: a probe is due
        # near: probed at the width that would pay most were it right 90% of the time, 1 here
        assert plan(policy, list(range(50)), SP) == ((None, 0) if m is far else (m, 1))


class WrongModel(ScriptedDrafter):
    name = "model"


def test_always_wrong_drafter_falls_back_to_plain_and_reprobes():
    rt = FakeRuntime(n_vocab=16, n_ctx=600, seed=1)
    rt.eog = 999
    flat = CostCurve([1.0] * 9)  # speculation would pay if drafts were right
    policy = AdaptivePolicy(flat, k_max=8, probe_every=16, max_probe_every=64)
    # A fixed curve and price: the fake runtime's wall times must not move the estimates.
    policy.curve.smoothing = 0.0
    # wrong at its first token but now and then by chance (1 in ~14 kept): at 0.2 target
    # tokens a token, a draft must be kept 1 time in 5 to pay
    wrong = WrongModel(FakeRuntime(n_vocab=16), wrong_at=0, token_s=0.2)
    dec = SpeculativeDecoder(rt, [wrong], policy)
    out = dec.generate([1, 2, 3], max_tokens=400)
    steps = out.stats
    drafted_steps = steps.n_drafts
    # Estimates start at 0.6 and fall 10% per failure: a dozen steps before plain wins, then
    # one probe per interval (16, 32, 64, 64, ...).
    assert steps.n_plain_steps > 0
    assert 5 <= drafted_steps <= 20, drafted_steps
    assert policy.estimate(wrong).interval == 64
    assert out.tokens == SpeculativeDecoder(rt).generate([1, 2, 3], max_tokens=400).tokens


def test_model_drafter_that_cannot_win_is_never_probed():
    rt = FakeRuntime(n_vocab=16, n_ctx=600, seed=1)
    rt.eog = 999
    cpu = CostCurve([float(n) for n in range(1, 10)])  # a 0.7x draft loses even at 100%
    policy = AdaptivePolicy(cpu, k_max=8)
    policy.curve.smoothing = 0.0
    right = WrongModel(FakeRuntime(n_vocab=16), wrong_at=None, token_s=0.7)
    out = SpeculativeDecoder(rt, [right], policy).generate([1, 2, 3], max_tokens=200)
    assert out.stats.n_drafts == 0


def test_a_burst_of_slow_one_token_passes_does_not_turn_a_losing_drafter_on():
    """The host runs something for a while and plain decoding's one-token passes take 3x.
    The curve follows the speed but keeps its calibrated shape: a draft model that loses on
    this CPU still loses, and is neither drafted nor brought into step. Learned width by
    width, the burst made a 2-token pass look cheaper than a one-token one."""
    curve = CostCurve([0.05 * r for r in (1.0, 1.55, 2.47, 3.2, 4.2, 5.0, 5.8, 6.6, 7.4)])
    m = model(0.47 * 0.05, behind=0)  # a 0.5B draft beside the 1.5B target on 2 cores
    policy = AdaptivePolicy(curve, k_max=8)
    policy.begin([m])
    for _ in range(30):
        policy.observe(None, 0, 0, 0.0, 0.15)
    assert curve.ratios() == pytest.approx([1.0, 1.55, 2.47, 3.2, 4.2, 5.0, 5.8, 6.6, 7.4])
    assert curve.target(1) == pytest.approx(0.15, rel=0.05)  # the new speed is followed
    assert not policy.can_win(policy.estimate(m))
    assert plan(policy, list(range(50)), SP) == (None, 0)


def test_whether_a_draft_model_can_win_follows_its_price_in_target_tokens():
    """can_win keeps its answer while the price in one-token passes holds (every step
    rescales curve and price alike) and answers afresh when the price moves."""
    curve = CostCurve([0.05 * r for r in (1.0, 1.55, 2.47, 3.2, 4.2, 5.0, 5.8, 6.6, 7.4)])
    m = model(0.1 * 0.05, behind=0)
    policy = AdaptivePolicy(curve, k_max=8)
    policy.begin([m])
    e = policy.estimate(m)
    assert policy.can_win(e)
    for _ in range(5):  # a slower host: curve and price rescale together
        policy.observe(None, 0, 0, 0.0, 0.08)
    assert curve.target(1) > 0.055 and policy.can_win(e)
    e.token_s = 0.6 * curve.target(1)  # dearer than any draft on this curve can pay
    assert not policy.can_win(e)
    e.token_s = 0.1 * curve.target(1)
    assert policy.can_win(e)


# --- prompt lookup learned in shadow: its previews judged by the emitted tokens -------------

LLAMA_CPU = CostCurve([1.0, 1.55, 2.47, 3.2, 4.2, 5.0, 5.8, 6.6, 7.4])  # measured shape, 2 cores


def test_a_shadow_is_judged_by_the_tokens_emitted_since_it_was_cast():
    shadow = Shadow(at=3, tokens=(7, 8, 9), key=2)
    assert shadow.outcome([0, 0, 0]) is None  # nothing emitted yet
    assert shadow.outcome([0, 0, 0, 7]) is None  # one right: a chance match, maybe
    assert shadow.outcome([0, 0, 0, 7, 8]) == (2, 2)  # two right: learned now
    assert shadow.outcome([0, 0, 0, 5]) == (1, 0)
    assert shadow.outcome([0, 0, 0, 7, 8, 5, 1]) == (3, 2)
    assert shadow.outcome([0, 0, 0, 7, 8, 9, 1]) == (3, 3)
    assert Shadow(at=3, tokens=(7,), key=2).outcome([0, 0, 0, 7]) == (1, 1)  # all of it


def test_a_preview_is_learned_from_the_tokens_the_target_emits_after_it():
    """A 2-token pass at 1.75 one-token passes: a 2-token match loses at its prior (0.4) and
    after two right tokens (0.7), so each step is plain and casts the next preview."""
    ngram = NgramDrafter(max_ngram=2)
    policy = AdaptivePolicy(CostCurve([1.0, 1.75, 2.5, 3.2, 4.2]), k_max=4)
    policy.begin([ngram])
    e = policy.estimate(ngram)
    ctx = [1, 2, 3, 4, 5, 6, 9, 1, 2]  # "1 2" was followed by 3 4 5 6 ...
    assert plan(policy, ctx, SP) == (None, 0)  # a 2-token match's prior (0.4) loses here
    assert e.shadow == Shadow(at=9, tokens=(3, 4, 5, 6), key=2)
    ctx += [3, 4]  # plain steps emit 3 and 4: both right, learned at once
    assert plan(policy, ctx, SP) == (None, 0)
    right_so_far = ByMatchLength()
    right_so_far.observe(2, 2, 2)
    assert e.acceptance.values == right_so_far.values
    assert e.shadow == Shadow(at=11, tokens=(5, 6, 9, 1), key=2)  # the next preview
    ctx += [5, 9]  # ... then 5, and 9 where 6 was previewed
    plan(policy, ctx, SP)
    want = ByMatchLength()
    want.observe(2, 4, 3)  # what a verify pass of the 4-token draft would have reported
    assert e.acceptance.values == want.values
    assert e.shadow is not None and e.shadow.at == len(ctx)  # the next preview is cast


def test_a_copy_is_drafted_a_few_tokens_after_it_starts_where_a_fresh_match_loses():
    """A 2-token pass at 1.75x a 1-token one: at its prior (0.7) a 4-token match loses, so
    prompt lookup waits for its previews to be judged. Judged after two right tokens, the copy
    is drafted after 7 plain tokens; judged by all 16 previewed tokens (before), after 17, and
    half of ten calibrations of one CPU (2-token ratio 1.61-1.86) lost 6-17% on edit and code
    (bench/replay.py --believed at commit f7269df, docs/benchmarks.md)."""
    ngram = NgramDrafter()
    policy = AdaptivePolicy(CostCurve([1.0, 1.75, 2.47, 3.2, 4.2, 5.0, 5.8, 6.6, 7.4]), k_max=8)
    policy.begin([ngram])
    passage = list(range(100, 140))
    ctx = [1, 2, 3, *passage, 7, 8]
    plain_steps = 0
    while plan(policy, ctx, SP) == (None, 0):
        ctx.append(passage[plain_steps])  # the target copies the passage
        plain_steps += 1
    assert plain_steps == 7


def test_a_drafter_drafting_now_leaves_no_shadow_to_count_twice():
    ngram = NgramDrafter(max_ngram=2)
    policy = AdaptivePolicy(CostCurve([1.0] * 5), k_max=4)  # flat: any match pays
    policy.begin([ngram])
    e = policy.estimate(ngram)
    e.acceptance.values[2] = 0.0  # a 2-token match is never right: plain, and a shadow
    ctx = [1, 2, 3, 4, 5, 6, 9, 1, 2]
    assert plan(policy, ctx, SP) == (None, 0)
    assert e.shadow == Shadow(at=9, tokens=(3, 4, 5, 6), key=2)
    e.acceptance.values[2] = 0.9  # ... now it is: it drafts, and its pass will judge it
    assert plan(policy, [*ctx, 3], SP) == (ngram, 4)
    assert e.shadow is None


def test_prompt_lookup_is_never_probed_on_text_it_cannot_predict():
    """Random text on a CPU-like curve: prompt lookup's previews are all judged in shadow,
    so no step pays a wider pass to learn that they are wrong (a probe every 4-128 steps did:
    7 drafts in 400 tokens, none accepted)."""
    rt = FakeRuntime(n_vocab=16, n_ctx=600, seed=1)
    rt.eog = 999
    curve = CostCurve(list(LLAMA_CPU.target_s), smoothing=0.0)  # wall times must not move it
    policy = AdaptivePolicy(curve, k_max=8)
    ngram = NgramDrafter()
    dec = SpeculativeDecoder(rt, [ngram], policy)
    events = list(dec.stream([1, 2, 3], max_tokens=400))
    assert [ev.n_drafted for ev in events if ev.n_drafted] == []
    learned = policy.estimate(ngram).acceptance.values
    assert set(learned) == {1, 2, 3} and max(learned.values()) < 0.3  # judged, and low
    tokens = [t for ev in events for t in ev.tokens]
    assert tokens == SpeculativeDecoder(rt).generate([1, 2, 3], max_tokens=400).tokens


# --- a third drafter: chosen, priced and observed like the other two ------------------------


class Oracle(ScriptedDrafter):
    """Always right, under a name the controller has never heard of."""

    name = "oracle"


def test_a_third_drafter_is_chosen_priced_and_observed_like_the_others():
    rt = FakeRuntime(n_vocab=16, n_ctx=600, seed=1)
    rt.eog = 999
    curve = CostCurve([1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4])
    curve.smoothing = 0.0  # the fake runtime's wall times must not move the curve or prices
    policy = AdaptivePolicy(curve, k_max=8)
    wrong = WrongModel(FakeRuntime(n_vocab=16), wrong_at=0, token_s=0.01)
    oracle = Oracle(FakeRuntime(n_vocab=16, seed=1), wrong_at=None, token_s=0.01)
    ngram = NgramDrafter()
    dec = SpeculativeDecoder(rt, [wrong, ngram, oracle], policy)
    out = dec.generate([1, 2, 3], max_tokens=120)

    # chosen: always right, so it ends up drafting the longest drafts, for most steps
    assert out.stats.steps_by_drafter["oracle"] > 0.8 * out.stats.n_steps
    assert max(oracle.proposals) == 8  # its prior (0.6) alone would give 4
    # observed: its own acceptance estimate rose, the always-wrong drafter's fell
    assert policy.estimate(oracle).acceptance.alphas(0, 8) > [0.9] * 8  # from 0.6, 10% a step
    assert out.stats.steps_by_drafter["model"] >= 1
    assert policy.estimate(wrong).acceptance.alphas(0, 1) < [0.6]
    assert isinstance(policy.estimate(ngram).acceptance, ByMatchLength)
    # the output is the target's own, whoever drafted it
    assert out.tokens == SpeculativeDecoder(rt).generate([1, 2, 3], max_tokens=120).tokens


def test_a_third_drafter_is_priced_by_its_own_cost_and_catch_up():
    curve = CostCurve([1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4])
    oracle = Oracle(FakeRuntime(n_vocab=16), wrong_at=None, token_s=0.01)
    policy = AdaptivePolicy(curve, k_max=8)
    policy.begin([oracle])
    # at its prior acceptance (0.6): E(4) / (4 * 0.01 + 1.25) = 1.859 tokens/s is the best k
    assert plan(policy, [1, 2, 3], SP) == (oracle, 4)
    oracle.token_s = 2.0  # a new policy reads the drafter's price: now it never pays
    policy = AdaptivePolicy(curve, k_max=8)
    policy.begin([oracle])
    assert plan(policy, [1, 2, 3], SP) == (None, 0)
    # learned: the observed seconds per token pull the starting price, at most halving it
    policy.observe(oracle, 4, 4, t_draft=0.04, t_verify=1.2)  # the curve's own t(5)
    assert policy.estimate(oracle).token_s == 2.0 + curve.smoothing * (2.0 / 2 - 2.0)
    # catch-up: in step it pays; 1000 tokens behind, the same drafter loses to plain
    for behind, best_k in ((0, 3), (1000, 0)):
        cheap = Oracle(FakeRuntime(n_vocab=16), wrong_at=None, token_s=0.05, behind=behind)
        policy = AdaptivePolicy(curve, k_max=8)
        policy.begin([cheap])
        assert plan(policy, [1, 2, 3], SP) == ((cheap, best_k) if best_k else (None, 0))


def test_a_step_that_leaves_the_draft_model_in_use_behind_is_charged_its_catch_up():
    """A free one-token guess kept 40% of the time beats a draft model kept 75% by a hair,
    but each step without the draft model costs it a catch-up later (0.35 x the curve's
    slope, 0.2, per token): with that charged, the draft model stays in use."""
    curve = CostCurve([1.0, 1.14, 1.42, 1.54, 1.79])
    draft_model = model(token_s=0.35)
    lookup = ScriptedDrafter(FakeRuntime(), None, token_s=0.0, name="lookup")
    policy = AdaptivePolicy(curve, k_max=4)
    policy.begin([draft_model, lookup])
    policy.estimate(draft_model).acceptance = ByPosition(prior=0.75)
    policy.estimate(lookup).acceptance = ByPosition(prior=0.4)
    assert plan(policy, [1, 2, 3], SP) == (draft_model, 1)
    assert policy.chosen_rate == pytest.approx(1.75 / (0.35 + 1.14))
    assert policy.left_behind_s([policy.estimate(draft_model)]) == pytest.approx(0.35 * 0.2)
    # uncharged, the guess wins: 1.4 / 1.14 > 1.75 / 1.49
    options = [policy.option(policy.estimate(d), 4) for d in (draft_model, lookup)]
    assert best_choice(curve, options, 4).drafter is lookup
    # a draft model far behind is not in use: nothing to charge
    draft_model.behind = 40
    plan(policy, [1, 2, 3], SP)
    behind = policy.estimate(draft_model)
    assert not policy.in_use(behind, policy.option(behind, 4))


def test_price_and_acceptance_outlive_a_request():
    curve = CostCurve([1.0] * 9)
    oracle = Oracle(FakeRuntime(n_vocab=16), wrong_at=None, token_s=0.5)
    policy = AdaptivePolicy(curve, k_max=8)
    policy.begin([oracle])
    policy.observe(oracle, 2, 0, t_draft=0.8, t_verify=1.0)
    learned = policy.estimate(oracle).token_s
    assert learned == 0.5 + curve.smoothing * (0.4 - 0.5)
    # a first request: the prior is worth COLD_WEIGHT (2) outcomes, so the first moves 1/3
    assert policy.estimate(oracle).acceptance.alphas(0, 1) == [pytest.approx(0.4)]
    policy.begin([oracle])
    assert policy.estimate(oracle).token_s == learned
    # the next request starts from the outcomes so far (1 rejected), the prior as 20 tokens
    assert policy.estimate(oracle).acceptance.alphas(0, 2) == [pytest.approx(12 / 21)] * 2


def test_one_observed_cost_pulls_an_estimate_at_most_twofold():
    assert followed(1.0, 1.5, 0.1) == pytest.approx(1.05)  # within the bound: the plain EMA
    assert followed(1.0, 50.0, 0.1) == pytest.approx(1.1)  # as if it took 2.0
    assert followed(1.0, 0.01, 0.1) == pytest.approx(0.95)  # as if it took 0.5
    assert followed(0.0, 3.0, 0.1) == 3.0  # no estimate yet: the first observation whole
    curve = CostCurve([1.0, 1.2, 1.5])
    assert curve.observe_target(2, 60.0) == pytest.approx(1.1)
    assert curve.target_s == pytest.approx([1.1, 1.32, 1.65])


def test_one_slow_draft_pass_does_not_price_the_draft_model_out_of_later_requests():
    """A cold first pass (weights paged in, a GPU's first launch of a shape) took 50x the
    draft model's price. Followed unclipped, the price rose to 2.7 target tokens, the draft
    model lost at every later request's start, was never prefilled, never drafted, and its
    price was never observed again (bench/replay.py --cold at commit f7269df)."""
    policy = AdaptivePolicy(ONNX_CPU, k_max=8)
    m = model(0.45, behind=40)
    policy.begin([m])
    assert to_sync(policy, list(range(50))) == [m]
    policy.observe(m, 2, 2, t_draft=2 * 50 * 0.45, t_verify=ONNX_CPU.target(3))
    assert policy.estimate(m).token_s == pytest.approx(0.45 + 0.1 * (0.9 - 0.45))
    policy.begin([m])  # the next request: 40 tokens of prompt to prefill
    assert to_sync(policy, list(range(50))) == [m]


def test_a_drafter_of_unknown_price_takes_its_first_observed_price_whole():
    policy = AdaptivePolicy(CostCurve([1.0] * 9), k_max=8)
    m = model(None)
    policy.begin([m])
    policy.observe(m, 2, 2, t_draft=0.6, t_verify=1.0)
    assert policy.estimate(m).token_s == pytest.approx(0.3)


def test_fixed_policy_picks_its_drafter_by_name_and_refuses_a_missing_one():
    oracle = Oracle(FakeRuntime(), None)
    policy = FixedPolicy("oracle", 3)
    policy.begin([NgramDrafter(), oracle])
    assert policy.plan([1], SP, []) == (oracle, 3)
    try:
        FixedPolicy("model", 3).begin([oracle])
    except ValueError as e:
        assert str(e) == "no drafter named 'model'; have ['oracle']"
    else:
        raise AssertionError("FixedPolicy accepted a drafter that is not there")


# --- keeping a draft model in step (to_sync) -------------------------------------------------

ONNX_CPU = CostCurve([1.0, 1.04, 1.1, 1.16, 1.22, 1.28, 1.34, 1.4, 1.46])


def test_a_drafter_that_loses_by_its_catch_up_alone_is_synced():
    """40 tokens behind (a new prompt, or steps others took), a 0.45x draft model at its
    prior acceptance loses to plain by its catch-up; in step it wins: catch it up."""
    policy = AdaptivePolicy(ONNX_CPU, k_max=8)
    m = model(0.45, behind=40)
    policy.begin([m])
    assert to_sync(policy, list(range(50))) == [m]
    m.sync(list(range(50)))
    assert to_sync(policy, list(range(50))) == []  # in step now: nothing to catch up
    assert plan(policy, list(range(50)), SP)[0] is m


def test_a_drafter_left_behind_is_not_synced_when_it_would_not_win_in_step():
    policy = AdaptivePolicy(ONNX_CPU, k_max=8)
    weak, cheap_but_near = model(0.45, behind=40), model(0.45, behind=2)
    policy.begin([weak, cheap_but_near])
    policy.estimate(weak).acceptance = ByPosition(prior=0.2)  # plain beats it even in step
    policy.estimate(weak).trial = False  # judged before: no trial
    assert to_sync(policy, list(range(50))) == []  # 2 behind: the next proposal's re-forward
    free = NgramDrafter()
    policy.begin([free])
    assert to_sync(policy, [1, 2, 3, 1, 2]) == [free]  # the prompt, with the target's prefill
    assert to_sync(policy, [1, 2, 3, 1, 2, 3]) == []  # then it indexes as it goes


def test_a_drafter_whose_best_in_step_is_plain_is_not_synced_after_plain_charged_for_it():
    """Where the target keeps one graph, a draft model right 69% of the time wins in a run of
    steps (1.69 tokens for 0.31 + 1.14 passes) but not from plain decoding (four switches of
    0.26 more). The last plan chose plain, charged for leaving that model behind (0.93 tokens
    a pass): its in-step best is plain, at 1.0 uncharged, which beat 0.93 and caught it up
    before every other plain step (the H200 7B curve on HumanEval: 0.91x plain). Right 99% of
    the time it wins from plain too, and is caught up."""
    curve = CostCurve([1.0, 1.14, 1.34, 1.58, 1.8], switch_s=0.26)
    for acceptance, synced in ((0.69, False), (0.99, True)):
        policy = AdaptivePolicy(curve, k_max=4)
        m = model(0.31, behind=3)
        policy.begin([m])
        e = policy.estimate(m)
        e.acceptance, e.trial, e.judged = ByPosition(prior=acceptance), False, COLD_JUDGED
        to_sync(policy, list(range(50)))  # the request's prompt
        policy.observe(None, 0, 0, 0.0, 1.0)  # plain, as the last plan chose
        policy.chosen_rate = 0.93
        assert to_sync(policy, list(range(50))) == ([m] if synced else [])


def test_mid_request_only_a_drafter_a_few_tokens_behind_is_caught_up():
    """After the prompt, a draft model is caught up only where that costs at most one target
    token (0.45 x t(3)/t(1) here) and in step it would beat the last choice; 40 tokens behind
    (0.45 x t(40)/t(1) = 1.49 target tokens) it stays behind, priced with its catch-up."""
    policy = AdaptivePolicy(ONNX_CPU, k_max=8, probe_every=4)
    far, near = model(0.45, behind=40), model(0.45, behind=3)
    policy.begin([far, near])
    assert to_sync(policy, list(range(50))) == [far, near]  # the prompt: both prefilled
    assert to_sync(policy, list(range(50))) == [near]  # mid-request now
    for _ in range(8):
        policy.observe(None, 0, 0, 0.0, 1.0)  # idle steps: a probe would be due
    assert to_sync(policy, list(range(50))) == [near]  # probes never pay a long catch-up
    policy.chosen_rate = 3.0  # a long lookup draft won the last step
    assert to_sync(policy, list(range(50))) == []


def test_on_one_graph_a_draft_model_is_caught_up_only_where_plan_would_draft():
    """Where leaving plain decoding costs four switches, a draft model 5 tokens behind that
    would win in step without them is not caught up before a step plan keeps plain (it was,
    a draft pass a token for nothing, H200 7B curve); the prompt is caught up as ever; and
    rent-or-buy counts the catch-up with the switches it buys: after enough plain steps lost
    to it, plan drafts, the drafter forwarding what it missed in its proposal."""
    curve = CostCurve([1.0, 1.1, 1.2, 1.3, 1.4, 1.5], switch_s=0.5)
    policy = AdaptivePolicy(curve, k_max=4)
    m = model(0.3, behind=5)
    policy.begin([m])
    policy.estimate(m).acceptance = ByPosition(prior=0.8)
    policy.estimate(m).idle = 0  # judged before: no first probe, no trial
    policy.estimate(m).trial = False
    assert to_sync(policy, list(range(50))) == [m]  # the prompt
    assert to_sync(policy, list(range(50))) == []  # from plain: 4 switches to pay
    steps = 0
    while plan(policy, list(range(50)), SP)[1] == 0:
        policy.observe(None, 0, 0, 0.0, 1.0)
        steps += 1
    # in a row k = 2 gives 1.36 tokens a pass: each plain step loses 1 - 1 / 1.36 = 0.26 of
    # a pass; buying costs 4 switches (2.0) and 0.3 x t(5)/t(1) = 0.42 of catch-up: 10 steps
    # (8 with the switches alone)
    assert steps == 10


def test_a_fixed_policy_prefills_its_drafter_once_per_request():
    m = model(0.45, behind=40)
    policy = FixedPolicy("model", 2)
    policy.begin([m])
    assert policy.to_sync([1, 2, 3], []) == [m]
    assert policy.to_sync([1, 2, 3, 4], []) == []
    policy.begin([m])
    assert policy.to_sync([1, 2, 3], []) == [m]
    plain = FixedPolicy(None, 0)
    plain.begin([m])
    assert plain.to_sync([1, 2, 3], []) == []


# --- a runtime that keeps one CUDA graph (llama.cpp on CUDA) ----------------------------------


def test_a_verify_pass_is_charged_its_switch_by_width():
    """draft_rates adds switch_s[n - 1] to a pass of n tokens; best_choice charges plain its
    switch_s[0]: a draft that wins on the curve alone loses to plain once its passes cost a
    switch each."""
    flat = CostCurve([1.0] * 9)
    d = NgramDrafter()
    option = Option(d, [0.5] * 2, 0.0)
    assert draft_rates(flat, option, 2, [0.0, 1.0, 2.0]) == pytest.approx([1.5 / 2, 1.75 / 3])
    assert best_choice(flat, [option], 2).k == 2
    assert best_choice(flat, [option], 2, switch_s=[0.0, 1.0, 2.0]).k == 0
    assert best_choice(flat, [option], 2, switch_s=[1.0, 1.0, 1.0]).k == 2  # plain's too


def one_graph_policy(switch_s=0.5):
    policy = AdaptivePolicy(CostCurve([1.0, 1.2, 1.4, 1.6, 1.8], switch_s=switch_s), k_max=4)
    policy.begin([NgramDrafter()])
    return policy


def test_leaving_plain_decoding_costs_four_switches_and_a_run_of_one_width_none():
    """From plain steps a verify pass pays its own uncaptured pass, the capture of its width
    by the next and the two plain passes back (four switches); so right after leaving, the
    same width again is free; in a run of verify passes a new width pays one, the second
    pass of a width one (its capture), the third none; plain is never charged (prepaid)."""
    policy = one_graph_policy()
    assert policy.switches.switch_s() == [0.0, 2.0, 2.0, 2.0, 2.0]
    policy.observe(None, 2, 2, 0.0, 1.4 + 0.5)  # a 3-token pass: uncaptured
    assert policy.switches.switch_s() == [0.0, 0.5, 0.0, 0.5, 0.5]  # its capture was paid for
    policy.observe(None, 2, 2, 0.0, 1.4 + 0.5)  # the same width: captured now
    assert policy.switches.switch_s() == [0.0, 0.5, 0.0, 0.5, 0.5]
    policy.observe(None, 1, 1, 0.0, 1.2 + 0.5)  # another width, within a run: uncaptured
    assert policy.switches.switch_s() == [0.0, 0.5, 0.5, 0.5, 0.5]  # its capture is not prepaid
    policy.observe(None, 1, 1, 0.0, 1.2 + 0.5)  # captured now
    policy.observe(None, 1, 1, 0.0, 1.2)  # replayed
    assert policy.switches.switch_s() == [0.0, 0.0, 0.5, 0.5, 0.5]
    policy.observe(None, 0, 0, 0.0, 1.0 + 0.5)  # back to plain
    assert policy.switches.switch_s() == [0.0, 2.0, 2.0, 2.0, 2.0]
    assert policy.curve.target_s == pytest.approx([1.0, 1.2, 1.4, 1.6, 1.8])  # speed kept
    policy.begin([NgramDrafter()])
    assert policy.switches.switch_s() == [0.0, 2.0, 2.0, 2.0, 2.0]
    assert one_graph_policy(switch_s=0.0).switches.switch_s() == []  # any other runtime: nothing


def test_on_a_one_graph_runtime_a_lone_guess_stays_plain_and_a_long_copy_drafts():
    """A 2-token guess kept 60% of the time beats plain on the curve (1.6 tokens for 1.2
    passes) but not with four switches to pay (1.6 for 3.2); a 4-token copy kept 95% of the
    time still pays them (4.5 tokens for 3.8 passes)."""
    policy = one_graph_policy()
    d = NgramDrafter()
    guess, copy = Option(d, [0.6], 0.0), Option(d, [0.95] * 4, 0.0)
    assert best_choice(policy.curve, [guess], 4).k == 1
    assert best_choice(policy.curve, [guess], 4, switch_s=policy.switches.switch_s()).k == 0
    assert best_choice(policy.curve, [copy], 4, switch_s=policy.switches.switch_s()).k == 4


def test_a_first_request_learns_fast_from_its_prior_and_a_later_one_at_the_moving_average():
    """The prior is worth COLD_WEIGHT (2) outcomes in the first request that judges a drafter:
    its outcomes move the estimate by 1/3, 1/4, ... down to the smoothing (0.05). At 0.1 from
    the start, the kit's oracle drafter (kept 90%, free) was judged for 100 steps of a fresh
    128-token request before its 0.6 prior let it draft (bench/replay_grid.py)."""
    a = ByPosition()
    a.observe(0, 1, 1)
    assert a.alphas(0, 1) == [pytest.approx(0.6 + 0.4 / 3)]
    a.observe(0, 1, 1)
    first = 0.6 + 0.4 / 3
    assert a.alphas(0, 1) == [pytest.approx(first + (1 - first) / 4)]
    for _ in range(8):
        a.observe(0, 1, 1)
    a.next_request()  # ten outcomes known: the request starts from them
    start = a.alphas(0, 1)[0]
    assert start == pytest.approx((10 + 12) / 30)  # the prior: 0.6 of PRIOR_TOKENS (20)
    a.observe(0, 1, 0)  # the start is worth 12 outcomes (the prior's 2 and 10): 1/13, not 0.05
    assert a.alphas(0, 1) == [pytest.approx(start - start / 13)]
    for _ in range(30):
        a.observe(0, 1, 0)
    before = a.alphas(0, 1)[0]
    a.observe(0, 1, 1)  # past 20 outcomes: the smoothing
    assert a.alphas(0, 1) == [pytest.approx(before + 0.05 * (1 - before))]


def test_a_probe_drafts_what_would_pay_most_were_the_drafter_right_90_percent_of_the_time():
    """On the H100's fp16 ONNX curve (2 tokens cost 4.1 plain passes, 9 cost 4.75) only a
    long draft can pay, so a probe drafts 8 (6.1 tokens at 0.9 for 4.75 passes): 2 could
    never show that the drafter pays. On a CPU's steep curve 2 pays most (at 0.9: 2.71
    tokens for 0.2 + 2.0 passes, 3 for 0.3 + 2.5 earn 1.228 where 2 earn 1.232)."""
    cliff = CostCurve([1.0, 4.1, 4.25, 4.36, 4.43, 4.53, 4.63, 4.7, 4.75])
    steep = CostCurve([1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0])
    for curve, price, k in ((cliff, 0.0, 8), (steep, 0.1, 2)):
        m = model(price)
        policy = AdaptivePolicy(curve, k_max=8)
        policy.begin([m])
        policy.estimate(m).acceptance = ByPosition(prior=0.3)  # plain beats it: only a probe
        assert plan(policy, list(range(10)), SP) == (m, k)


def test_probes_that_lose_wait_until_time_has_paid_for_them():
    """A probe owes what it cost beyond plain decoding's price for the tokens it emitted, once
    probes have judged the drafter on COLD_JUDGED tokens (as backing off waits for them); no
    drafter is probed until PROBE_BUDGET of the time since has paid that back, whatever its
    interval (1 step here). One that pays owes nothing. A drafter judged (COLD_JUDGED) drafts
    what would pay most were it right halfway between its estimate and always: at 0.3, 0.65,
    2 tokens here (2.07 tokens for 0.2 + 1.4 passes); never judged, what pays most at 90%: 4."""
    curve = CostCurve([1.0, 1.2, 1.4, 1.6, 1.8])

    def policy_of(m, judged: int) -> AdaptivePolicy:
        policy = AdaptivePolicy(curve, k_max=4, probe_every=1, max_probe_every=1)
        policy.begin([m])
        e = policy.estimate(m)
        e.acceptance = ByPosition(prior=0.3)  # plain beats it (k = 1 ties): only a probe
        e.judged, e.trial = judged, False
        return policy

    m = model(0.1)
    cold = policy_of(m, 0)
    assert plan(cold, list(range(10)), SP) == (m, 4)
    cold.observe(m, 2, 0, t_draft=0.2, t_verify=1.4)  # judged on 2 tokens: owes nothing
    assert cold.budget.debt_s == 0.0
    policy = policy_of(m, COLD_JUDGED)
    assert plan(policy, list(range(10)), SP) == (m, 2)
    policy.observe(m, 2, 0, t_draft=0.2, t_verify=1.4)  # 1 token for 1.6 passes: owes 0.6
    assert policy.budget.debt_s == pytest.approx(0.6)
    plain_steps = 0
    while plan(policy, list(range(10)), SP) == (None, 0):
        policy.observe(None, 0, 0, 0.0, 1.0)
        plain_steps += 1
    assert plain_steps in (30, 31)  # 0.6 / (PROBE_BUDGET * 1.0), rounding aside
    assert PROBE_BUDGET == 0.02
    policy.observe(m, 1, 1, t_draft=0.1, t_verify=1.2)  # 2 tokens for 1.3 passes: owes none
    assert policy.budget.debt_s == 0.0


def test_a_requests_probes_lose_at_most_its_probe_budget():
    """Owing per probe frees the first (COLD_JUDGED) and pays back as time passes, which a
    short request has too little of: a request of max_tokens may lose at most PROBE_BUDGET
    of its plain decoding time to probes, all of them counted. Here the first probe (4
    tokens, 0.4 + 1.8 passes, 1 token emitted) loses 1.2 passes; once its debt is paid
    (60 plain steps), the next (1 token, 0.3 lost were it wrong) fits the budget of a
    request of 80 tokens (1.6 passes) but not one of 70 (1.4). Until one has lost, a probe
    may cost more than the budget: a request of 20 tokens (0.4) probes once."""
    curve = CostCurve([1.0, 1.2, 1.4, 1.6, 1.8])
    m = model(0.1)

    def probes(max_tokens: int) -> list[int]:
        policy = AdaptivePolicy(curve, k_max=4, probe_every=1, max_probe_every=1)
        policy.begin([m], max_tokens)
        policy.estimate(m).acceptance = ByPosition(prior=0.3)  # plain beats it: only a probe
        drafted = []
        for _ in range(max_tokens):
            _, k = plan(policy, list(range(10)), SP)
            drafted.append(k)
            if k:
                policy.observe(m, k, 0, t_draft=0.1 * k, t_verify=curve.target(k + 1))
            else:
                policy.observe(None, 0, 0, 0.0, 1.0)
        return [k for k in drafted if k]

    assert probes(80) == [4, 1]
    assert probes(70) == [4]
    assert probes(20) == [4]


def test_a_drafter_never_judged_is_probed_at_the_first_step():
    """Not after probe_every steps: the kit's 128-token requests were an eighth over before
    a fresh controller first tried its drafter."""
    m = model(0.05)
    curve = CostCurve([1.0, 1.8, 2.5, 3.1, 3.6])  # at its 0.6 prior it loses; at 0.9 it wins
    policy = AdaptivePolicy(curve, k_max=4)
    policy.begin([m])
    assert plan(policy, list(range(10)), SamplingParams()) == (m, 4)  # what pays most at 0.9
    policy.observe(m, 4, 0, t_draft=0.2, t_verify=3.6)
    policy.begin([m])  # known now: the next request waits for its interval
    assert plan(policy, list(range(10)), SamplingParams()) == (None, 0)


def test_a_width_that_repays_its_switch_is_taken_once_staying_has_cost_as_much():
    """Rent-or-buy: each step kept at the myopic width (switches charged) adds what it loses
    against the steady best (switches left out); the steady one is taken once that adds up
    to the extra switch it is charged. A steady best that changes width starts over, and a
    width both are charged alike for accrues nothing (the myopic choice weighed it)."""
    policy = one_graph_policy(switch_s=0.5)
    d = policy.estimates[0].drafter
    policy.observe(d, 2, 2, 0.0, 1.4 + 0.5)
    policy.observe(d, 2, 2, 0.0, 1.4 + 0.5)  # a run at width 3, captured
    switch = policy.switches.switch_s()
    assert switch == [0.0, 0.5, 0.0, 0.5, 0.5]
    myopic, steady = Choice(d, 2, 2.0), Choice(d, 4, 2.5)
    # each step at k = 2 loses t(3) * (1 - 2.0 / 2.5) = 0.28 against k = 4, which pays 0.5
    assert policy.switches.rent_or_buy(myopic, steady, switch).k == 2
    assert policy.switches.regret == pytest.approx(0.28)
    assert policy.switches.rent_or_buy(myopic, steady, switch).k == 2
    assert policy.switches.rent_or_buy(myopic, steady, switch).k == 4  # 0.56 >= 0.5: bought
    assert policy.switches.regret == 0.0
    policy.switches.rent_or_buy(myopic, steady, switch)
    policy.switches.rent_or_buy(myopic, Choice(d, 3, 2.5), switch)  # another width: starts over
    assert policy.switches.regret == pytest.approx(0.28)
    assert policy.switches.rent_or_buy(myopic, Choice(d, 3, 2.5), switch).k == 2
    assert policy.switches.rent_or_buy(myopic, myopic, switch).k == 2  # no better: nothing accrues
    assert policy.switches.regret == 0.0
    fresh = one_graph_policy(switch_s=0.5)  # after plain, every width pays the same 1.5
    fresh.observe(None, 0, 0, 0.0, 1.0)
    alike, d = fresh.switches.switch_s(), fresh.estimates[0].drafter
    assert fresh.switches.rent_or_buy(Choice(d, 4, 2.0), Choice(d, 2, 2.5), alike).k == 4
    assert fresh.switches.regret == 0.0


def test_a_probe_that_beats_plain_decoding_pays_though_a_token_was_rejected():
    """A 2-token probe keeping 1: 2 tokens for a 3-token pass and 2 draft tokens. Where
    that costs 1.99 plain passes it beat plain, so the probe interval stays; where it costs
    2.52 it did not, and doubles, once COLD_JUDGED tokens have judged the drafter (before,
    one probe says too little to back off on). Keeping every token pays on any curve (a
    longer draft may)."""
    for t3, judged, interval in ((1.97, COLD_JUDGED, 16), (2.5, COLD_JUDGED, 32), (2.5, 0, 16)):
        m = model(0.01)
        policy = AdaptivePolicy(CostCurve([1.0, 1.7, t3, t3 + 0.6, t3 + 1.2]), k_max=4)
        policy.begin([m])
        policy.estimate(m).judged = judged
        assert plan(policy, list(range(10)), SP)[0] is m  # never judged: probed at once
        policy.observe(m, 2, 1, t_draft=0.02, t_verify=t3)
        assert policy.estimate(m).interval == interval
    m = model(0.01)
    policy = AdaptivePolicy(CostCurve([1.0, 1.7, 2.5, 3.1, 3.7]), k_max=4)
    policy.begin([m])
    plan(policy, list(range(10)), SP)
    policy.observe(m, 2, 2, t_draft=0.02, t_verify=2.5)
    assert policy.estimate(m).interval == 16


def test_a_draft_is_priced_as_its_first_token_then_the_rest():
    """A draft model's first pass re-reads the target's last token at another width: priced
    apart (first_s), a k-token draft costs first_s + (k - 1) * token_s; unmeasured, every
    token alike."""
    d = NgramDrafter()
    assert Option(d, [0.9] * 8, 1.0, first_s=2.0).draft_s(5) == 6.0
    assert Option(d, [0.9] * 8, 1.0, first_s=2.0).draft_s(1) == 2.0
    assert Option(d, [0.9] * 8, 1.0).draft_s(5) == 5.0
    flat = CostCurve([1.0] * 9)
    cheap_first = draft_rates(flat, Option(d, [1.0] * 4, 0.5, first_s=0.5), 4)
    dear_first = draft_rates(flat, Option(d, [1.0] * 4, 0.5, first_s=1.5), 4)
    assert cheap_first == pytest.approx([2 / 1.5, 3 / 2.0, 4 / 2.5, 5 / 3.0])
    assert dear_first == pytest.approx([2 / 2.5, 3 / 3.0, 4 / 3.5, 5 / 4.0])


def test_the_policy_learns_a_drafts_first_token_and_later_tokens_apart():
    """observe with t_first: the first token's seconds follow t_first, the others'
    (t_draft - t_first) / (k - 1); a 1-token draft teaches the first alone; without t_first
    every token follows t_draft / k, as before."""
    m = model(0.3)
    policy = AdaptivePolicy(CostCurve([1.0, 1.1, 1.2, 1.3, 1.4, 1.5]), k_max=5)
    policy.begin([m])
    policy.observe(m, 4, 4, t_draft=0.6 + 3 * 0.5, t_verify=1.4, t_first=0.6)
    e = policy.estimate(m)
    assert (e.first_s, e.token_s) == (pytest.approx(0.33), pytest.approx(0.32))
    policy.observe(m, 1, 1, t_draft=0.6, t_verify=1.1, t_first=0.6)
    assert (e.first_s, e.token_s) == (pytest.approx(0.357), pytest.approx(0.32))
    plain = model(0.3)
    policy.begin([plain])
    policy.observe(plain, 4, 4, t_draft=1.5, t_verify=1.4)
    assert (policy.estimate(plain).first_s, policy.estimate(plain).token_s) == (
        None,
        pytest.approx(0.3075),
    )


def test_the_two_plain_passes_after_the_prompt_pay_their_switches_not_the_curve():
    """After the prompt's pass the next runs uncaptured and the one after captures: their
    switches are not the target's speed (learned as such, the curve rose 5% at each
    request's start, and a draft model's price with it); the third pass is a replay."""
    policy = one_graph_policy()
    m = model(0.3)
    policy.begin([m])
    assert policy.switches.switch_s() == [0.0, 2.0, 2.0, 2.0, 2.0]  # priced as from plain
    for t_verify in (1.0 + 0.5, 1.0 + 0.5, 1.0):
        policy.observe(None, 0, 0, 0.0, t_verify)
    assert policy.curve.target_s == pytest.approx([1.0, 1.2, 1.4, 1.6, 1.8])
    assert policy.estimate(m).token_s == pytest.approx(0.3)


def test_a_drafter_never_judged_is_tried_from_the_prompt_while_its_probes_pay():
    """A 0.75x draft model 40 tokens behind loses at its 0.6 prior even in step, and would
    win at 0.9 drafting 1 token: never judged, it is prefilled with the prompt and probed
    step after step while a probe emits faster than plain (2 tokens for 0.75 + t(2) = 1.85
    passes), until a slow probe (1 token) or TRIAL_TOKENS judged end its trial; then it
    waits for its interval."""
    gpu = CostCurve([1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8])
    for last_kept, judged_before in ((0, 0), (1, TRIAL_TOKENS - 2)):
        policy = AdaptivePolicy(gpu, k_max=8)
        policy.curve.smoothing = 0.0
        m = model(0.75, behind=40)
        policy.begin([m])
        assert to_sync(policy, list(range(50))) == [m]  # the prompt, for its trial
        m.sync(list(range(50)))
        policy.estimate(m).judged = judged_before
        assert plan(policy, list(range(50)), SP) == (m, 1)
        policy.observe(m, 1, 1, t_draft=0.75, t_verify=1.1)  # faster than plain: goes on
        assert plan(policy, list(range(51)), SP) == (m, 1)
        policy.observe(m, 1, last_kept, t_draft=0.75, t_verify=1.1)
        assert plan(policy, list(range(55)), SP) == (None, 0)  # slow, or judged enough
        assert policy.estimate(m).trial is False
    known = AdaptivePolicy(gpu, k_max=8)
    known.memory.learned = taught(
        policy.estimates
    )  # judged in an earlier request: no trial, no prefill
    m.behind = 40
    known.begin([m])
    assert to_sync(known, list(range(50))) == []


def test_a_trial_ends_with_its_tokens_judged_in_plans_own_steps():
    """A drafter never judged that plan drafts outright (it wins at its prior) ends its trial
    once TRIAL_TOKENS of its tokens are judged, as probes would end it. Left open, each plain
    step plan chose later was a probe at once, its interval ignored."""
    curve = CostCurve([1.0, 1.5, 2.0, 2.5])
    policy = AdaptivePolicy(curve, k_max=3)
    policy.curve.smoothing = 0.0
    m = model(0.05)
    policy.begin([m])
    e = policy.estimate(m)
    assert e.trial
    ctx = list(range(10))
    while e.judged < TRIAL_TOKENS:
        drafter, k = plan(policy, ctx, SP)
        assert drafter is m and k > 0 and policy.probing is None  # plan's choice, no probe
        policy.observe(m, k, k, t_draft=0.05 * k, t_verify=curve.target(k + 1))
        ctx += [0] * (k + 1)
    assert e.trial is False
    while (choice := plan(policy, ctx, SP)) != (None, 0):  # wrong from here on
        assert policy.probing is None
        policy.observe(m, choice[1], 0, t_draft=0.05, t_verify=curve.target(choice[1] + 1))
        ctx += [0]
    plans = []
    for _ in range(e.interval):
        policy.observe(None, 0, 0, t_draft=0.0, t_verify=1.0)
        ctx += [0]
        plans.append(plan(policy, ctx, SP))
    assert plans[:-1] == [(None, 0)] * (e.interval - 1)  # plain until its interval passed
    assert plans[-1][0] is m and policy.probing is m  # then a probe


def test_the_last_steps_drafter_stays_while_within_the_stay_margin_of_plain():
    """Drafting 1 token for 0.05 + 1.25 passes emits (1 + a) / 1.3 tokens a pass: at a = 0.29
    0.992 of plain decoding's. plan keeps the drafter the last step drafted with there, within
    STAY_MARGIN, but does not start drafting with it from plain, nor keep it at a = 0.25
    (0.962), nor carry the last drafter into a new request."""
    assert (1 + 0.29) / 1.3 >= 1 - STAY_MARGIN > (1 + 0.25) / 1.3
    cases = ((0.29, True, False, (1,)), (0.29, False, False, ()), (0.25, True, False, ()),
             (0.29, True, True, ()))  # fmt: skip
    for a, drafted_last, new_request, want in cases:
        policy = AdaptivePolicy(CostCurve([1.0, 1.25]), k_max=1)
        policy.curve.smoothing = 0.0
        m = model(0.05)
        policy.begin([m])
        if drafted_last:
            policy.observe(m, 1, 1, t_draft=0.05, t_verify=1.25)
        if new_request:
            policy.begin([m], max_tokens=64)
        e = policy.estimate(m)
        e.trial, e.idle = False, 0
        e.acceptance.sure[:], e.acceptance.unsure[:] = [a], [a]
        assert plan(policy, list(range(10)), SP) == ((m, *want) if want else (None, 0)), a
