"""The loop's logic on a deterministic fake runtime. Real-model tests are in test_llamacpp.py."""

import itertools
import types
from dataclasses import replace

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter, NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import ContextOverflowError, EdgespecError
from edgespec.sampling import SamplingParams
from edgespec.textstream import TextStream
from tests.fakes import FakeRuntime, ScriptedDrafter, logits_to_probs
from tests.stats import assert_law

PROMPT = [3, 1, 4, 1, 5]


def plain(rt, prompt=PROMPT, **kw):
    return SpeculativeDecoder(rt).generate(prompt, speculative=False, **kw)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_equals_plain_when_wrong_at_every_position(k):
    rt = FakeRuntime(n_vocab=16, n_ctx=128)
    ref = plain(rt, max_tokens=40)
    for wrong_at in [None, *range(k)]:
        drafter = ScriptedDrafter(FakeRuntime(n_vocab=16), wrong_at)
        dec = SpeculativeDecoder(rt, [drafter], FixedPolicy("scripted", k))
        out = dec.generate(PROMPT, max_tokens=40)
        assert out.tokens == ref.tokens, (k, wrong_at)
        if wrong_at is not None and out.stats.n_steps > 1:
            assert out.stats.acceptance_by_pos[wrong_at] == 0.0
        assert out.stats.n_generated == len(ref.tokens)


def test_all_accepted_emits_k_plus_one_per_step():
    rt = FakeRuntime(n_vocab=16, n_ctx=128, seed=5)
    rt.eog = 999  # before the decoder reads the vocabulary: nothing ends the run early
    dec = SpeculativeDecoder(rt, [ScriptedDrafter(rt, None)], FixedPolicy("scripted", 4))
    events = list(dec.stream(PROMPT, max_tokens=12))
    assert [len(e.tokens) for e in events] == [5, 5, 2]  # 4 accepted + bonus; then room for 2
    assert events[-1].tokens == tuple(plain(rt, max_tokens=12).tokens[10:])
    stats = events[-1].stats
    assert (stats.n_draft_tokens, stats.n_accepted, stats.n_steps) == (9, 9, 3)
    # prefill leaves the last prompt token out; then [last, *4 drafted] twice, [last, *1]
    assert rt.forward_calls[:4] == [len(PROMPT) - 1, 5, 5, 2]


def test_ngram_drafter_is_exact():
    rt = FakeRuntime(n_vocab=6, n_ctx=256, seed=2)  # small vocabulary: many repeats
    ref = plain(rt, max_tokens=100)
    for k in (1, 3, 8):
        dec = SpeculativeDecoder(rt, [NgramDrafter(3)], FixedPolicy("ngram", k))
        out = dec.generate(PROMPT, max_tokens=100)
        assert out.tokens == ref.tokens
        assert out.stats.n_draft_tokens > 0


@pytest.mark.parametrize(
    "sp", [SamplingParams(), SamplingParams(0.8, seed=4)], ids=["greedy", "seeded"]
)
def test_a_padded_plain_step_carries_a_guess_and_changes_no_token(sp):
    """Where the target pads one-token passes to two rows, a plain step's second row is
    prompt lookup's guess: the same tokens as unpadded plain decoding, fewer passes."""
    rt, padded = (FakeRuntime(n_vocab=6, n_ctx=256, seed=2) for _ in range(2))  # many repeats
    rt.eog = padded.eog = 999  # before the decoders read the vocabulary: no early end
    padded.min_width = 2
    ref = plain(rt, max_tokens=100, sp=sp)
    out = plain(padded, max_tokens=100, sp=sp)
    assert out.tokens == ref.tokens
    stats = out.stats
    assert stats.steps_by_drafter["guess"] == stats.n_draft_tokens > 0
    assert 0 < stats.n_accepted < stats.n_draft_tokens
    assert stats.n_steps == len(out.tokens) - stats.n_accepted < ref.stats.n_steps
    assert padded.forward_calls[1:].count(2) == stats.n_draft_tokens  # one guess a pass


def test_context_full_finishes_with_length():
    rt = FakeRuntime(n_vocab=16, n_ctx=12, seed=4)
    rt.eog = 999  # never ends by itself
    dec = SpeculativeDecoder(rt, [ScriptedDrafter(rt, None)], FixedPolicy("scripted", 4))
    out = dec.generate(PROMPT, max_tokens=100)
    assert out.finish_reason == "length"
    assert len(PROMPT) + len(out.tokens) == 12 + 1  # the last token never enters the cache
    assert out.tokens == plain(rt, max_tokens=100).tokens


def test_max_tokens_is_exact_even_mid_draft():
    rt = FakeRuntime(n_vocab=16, n_ctx=128, seed=4)
    rt.eog = 999
    dec = SpeculativeDecoder(rt, [ScriptedDrafter(rt, None)], FixedPolicy("scripted", 8))
    out = dec.generate(PROMPT, max_tokens=7)
    assert (len(out.tokens), out.finish_reason) == (7, "length")


def test_eog_stops_and_is_not_emitted():
    rt = FakeRuntime(n_vocab=16, n_ctx=128)
    ref = plain(rt, max_tokens=100)
    rt.eog = ref.tokens[5]
    out = plain(rt, max_tokens=100)
    assert out.finish_reason == "stop"
    assert out.tokens == ref.tokens[: ref.tokens.index(rt.eog)]


def test_prompt_longer_than_context_is_refused():
    rt = FakeRuntime(n_ctx=8)
    with pytest.raises(ContextOverflowError) as e:
        plain(rt, prompt=list(range(8)))
    assert str(e.value) == (
        "the prompt is 8 tokens but the context holds 8; shorten the prompt or raise the "
        "context size (--n-ctx)"
    )


def test_empty_prompt_is_refused():
    with pytest.raises(EdgespecError, match="the prompt is empty"):
        plain(FakeRuntime(), prompt=[])


@pytest.mark.parametrize("backend", ["fake", "llama.cpp"])
def test_after_every_step_the_target_computes_what_a_fresh_one_fed_the_context_does(
    backend, request
):
    """The invariant, seen through what the cache computes: after every step, the target's
    logits for the next token equal those of a fresh runtime fed prompt + emitted tokens, so
    a rejected draft token never stays in the cache and an accepted one never goes (an
    engine rollback off by one, or a runtime whose rollback keeps the KV entries, fails).
    llama.cpp: the tiny float32 GGUF, bound 1e-4 (a stale entry moves logits by far more)."""
    if backend == "fake":
        rt, fresh = FakeRuntime(n_ctx=128), FakeRuntime(n_ctx=128)
        rt.eog, prompt = 999, list(PROMPT)
        oracle = FakeRuntime()
    else:
        from edgespec.runtimes.llamacpp import LlamaCppRuntime

        target_path = request.getfixturevalue("tiny_pair")[0]
        rt, fresh = LlamaCppRuntime(target_path, n_ctx=256), LlamaCppRuntime(target_path, n_ctx=256)
        prompt = rt.tokenize("the cat sat on", special=False)
        oracle = None
    drafter = ScriptedDrafter(oracle, wrong_at=1) if oracle else WrongAtDrafter(rt, 1)
    dec = SpeculativeDecoder(rt, [drafter], FixedPolicy(drafter.name, 4))
    context = list(prompt)
    steps = 0
    for event in dec.stream(prompt, max_tokens=12):
        context += event.tokens
        if event.finish_reason:
            break
        steps += 1
        assert rt.n_past == len(context) - 1
        probe = rt.forward([context[-1]])[-1]  # what the next verify pass would see first
        rt.rollback(len(context) - 1)
        fresh.reset()
        want = fresh.forward(context)[-1]
        np.testing.assert_allclose(probe, want, atol=1e-4, err_msg=f"after step {steps}")
    assert steps >= 3


class WrongAtDrafter:
    """Proposes the target's own greedy continuation (read from a second context), wrong at
    draft position wrong_at: one accepted, then a rejection, every step."""

    name = "wrong-at"
    token_s = 0.0

    def __init__(self, target, wrong_at):
        from edgespec.runtimes.llamacpp import LlamaCppRuntime

        self.oracle = LlamaCppRuntime(target.path, n_ctx=target.n_ctx)
        self.wrong_at = wrong_at

    def propose(self, context, k, sp):
        from edgespec.drafters import Draft

        self.oracle.reset()
        logits = self.oracle.forward(list(context), last_only=True)[-1]
        out = []
        for i in range(k):
            best = int(np.argmax(logits))
            token = (best + 1) % len(logits) if i == self.wrong_at else best
            out.append(token)
            logits = self.oracle.forward([token])[-1]
        return Draft(np.asarray(out, dtype=np.int32), None)

    def sync(self, context):
        pass

    def reset(self, rng):
        pass


def test_sampling_is_seeded_and_deterministic():
    rt = FakeRuntime(n_vocab=16, n_ctx=128)
    sp = SamplingParams(temperature=0.8, top_k=8, seed=42)
    dec = SpeculativeDecoder(rt, [NgramDrafter(2)], FixedPolicy("ngram", 4))
    a = dec.generate(PROMPT, max_tokens=30, sp=sp).tokens
    assert dec.generate(PROMPT, max_tokens=30, sp=sp).tokens == a


JOINT_PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]  # prompt lookup finds 3 tokens to draft: 3, 1, 2


def exact_joint(rt, prompt, sp, n_tokens=3):
    """[V] * n_tokens: the target's exact law of its first n_tokens tokens."""
    law = np.ones(())
    for _ in range(n_tokens):
        rows = [logits_to_probs(rt.logits_after([*prompt, *np.unravel_index(c, law.shape)]), sp)
                for c in range(law.size)] if law.ndim else [logits_to_probs(
                rt.logits_after(prompt), sp)]  # fmt: skip
        law = np.stack(rows).reshape(*law.shape, -1) * law[..., None]
    return law


def joint_counts(dec, sp, n: int, n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """The first three tokens of n requests for JOINT_PROMPT (seeds 0..n-1, max_tokens 4) as
    counts [V, V, V], and how many drafted tokens each of draft positions 0-2 held."""
    counts = np.zeros((n_vocab,) * 3)
    drafted = np.zeros(3)
    for seed in range(n):
        out = dec.generate(JOINT_PROMPT, max_tokens=4, sp=replace(sp, seed=seed))
        counts[tuple(out.tokens[:3])] += 1
        drafted += out.stats.drafted_by_pos[:3]
    return counts, drafted


JOINT_CASES = [  # (sampler, drafter, sampling params): every sampler, drafter and filter
    ("rejection", "model", SamplingParams(1.0)),
    ("rejection", "model", SamplingParams(0.7, top_k=3)),
    ("rejection", "model", SamplingParams(1.3, top_p=0.8)),
    ("rejection", "ngram", SamplingParams(1.0)),
    ("gumbel", "model", SamplingParams(1.0)),
    ("gumbel", "model", SamplingParams(1.3, top_p=0.8)),
    ("gumbel", "ngram", SamplingParams(0.7, top_k=3)),
]


@pytest.mark.parametrize(
    "sampler, drafter, sp", JOINT_CASES, ids=[f"{a}-{b}-{c}" for a, b, c in [
        (a, b, f"T{sp.temperature}-k{sp.top_k}-p{sp.top_p}") for a, b, sp in JOINT_CASES]]
)  # fmt: skip
def test_first_three_tokens_follow_the_target_joint_law(sampler, drafter, sp):
    """The joint law of the first three emitted tokens equals the target's exact one, with
    k = 3 (max_tokens 4), so all three come from draft positions 0, 1 and 2 whenever they are
    accepted. The model drafter is a real ModelDrafter on a far-off model: it draws each draft
    token from its own q at that position, with the random stream the engine gives it. A
    residual without q or q read from the wrong row at any position, or a drafter drawing
    from the verifier's stream, fails here. Bound: assert_law; N = 5,000 requests."""
    n_vocab, n = 5, 5000
    rt = FakeRuntime(n_vocab=n_vocab, n_ctx=64, seed=7, scale=1.5)
    rt.eog = 999
    if drafter == "model":
        d = ModelDrafter(FakeRuntime(n_vocab=n_vocab, n_ctx=64, seed=8, scale=1.5))
    else:
        d = NgramDrafter(2)
    dec = SpeculativeDecoder(rt, [d], FixedPolicy(d.name, 3))
    counts, drafted = joint_counts(dec, replace(sp, sampler=sampler), n, n_vocab)
    assert drafted[2] >= n  # position 2 was drafted in every request's first step
    assert_law(counts, exact_joint(rt, JOINT_PROMPT, replace(sp, seed=0)))


SEEDED = [
    SamplingParams(1.0, seed=3),
    SamplingParams(0.7, top_p=0.9, seed=4),
    SamplingParams(1.3, top_k=4, min_p=0.05, seed=5),
    SamplingParams(0.9, typical_p=0.7, seed=6),
]
SEEDED_IDS = ["T1", "T0.7-topp0.9", "T1.3-topk4-minp0.05", "T0.9-typical0.7"]


class RandomSplitPolicy:
    """Picks a drafter and k at random every step (its own random stream, not the
    request's): whatever the split of the tokens into steps, the output must not change."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.ks = []

    def begin(self, drafters, max_tokens=None):
        self.drafters = list(drafters)

    def plan(self, context, sp, offers):
        k = int(self.rng.integers(0, 7))
        self.ks.append(k)
        return self.drafters[int(self.rng.integers(len(self.drafters)))], k

    def to_sync(self, context, offers):
        return []

    def observe(self, drafter, k, n_accepted, t_draft, t_verify, unsure_end=False, t_first=0.0):
        pass

    def end(self):
        pass


def far_pair(n_vocab=8):
    rt = FakeRuntime(n_vocab=n_vocab, n_ctx=256, seed=7, scale=1.5)
    rt.eog = 999
    return rt, ModelDrafter(FakeRuntime(n_vocab=n_vocab, n_ctx=256, seed=8, scale=1.5))


@pytest.mark.parametrize("sp", SEEDED, ids=SEEDED_IDS)
def test_seeded_speculative_equals_seeded_plain_whatever_the_steps(sp):
    """A seeded request gives plain decoding's output token for token, whatever drafter and k
    each step takes (k = 0 included): the randomness of the token at position i is keyed to
    (seed, i), and every emitted token is the target's own Gumbel-max sample there."""
    rt, model = far_pair()
    ref = plain(rt, max_tokens=60, sp=sp).tokens
    splits = set()
    for run in range(6):
        policy = RandomSplitPolicy(run)
        dec = SpeculativeDecoder(rt, [model, NgramDrafter(2)], policy)
        out = dec.generate(PROMPT, max_tokens=60, sp=sp)
        assert out.tokens == ref, run
        assert out.stats.n_accepted > 0
        splits.add(tuple(policy.ks))
    assert len(splits) == 6  # six different splits gave the one output


def test_a_seeded_request_repeats_exactly_in_auto_mode():
    """Ten identical seeded requests under the adaptive policy (k and drafter chosen per step
    from measured time) give one output, and it is plain decoding's."""
    from edgespec.controller import AdaptivePolicy, CostCurve

    rt, model = far_pair()
    curve = CostCurve([1.0 + 0.1 * n for n in range(9)], draft_s=0.02)
    sp = SamplingParams(0.8, top_p=0.9, seed=11)
    ref = plain(rt, max_tokens=60, sp=sp).tokens
    outputs = set()
    for _ in range(10):
        dec = SpeculativeDecoder(rt, [model, NgramDrafter(2)], AdaptivePolicy(curve, k_max=8))
        out = dec.generate(PROMPT, max_tokens=60, sp=sp)
        assert out.stats.n_draft_tokens > 0
        outputs.add(tuple(out.tokens))
    assert outputs == {tuple(ref)}


def test_prompt_lookup_reads_the_prompt_with_the_targets_prefill_under_auto():
    """The prompt's n-grams are indexed in begin (counted as prefill), not by the first
    step's plan, where at 8,000 tokens they had cost decoding 18 ms."""
    from edgespec.controller import AdaptivePolicy, CostCurve

    rt, _ = far_pair()
    ngram = NgramDrafter(2)
    dec = SpeculativeDecoder(rt, [ngram], AdaptivePolicy(CostCurve([1.0, 1.1, 1.2]), k_max=2))
    tokens = list(PROMPT)
    dec.begin(tokens, SamplingParams())
    assert ngram.indexed == tokens


def test_unseeded_requests_differ_and_a_seed_fixes_them():
    rt, model = far_pair()
    dec = SpeculativeDecoder(rt, [model], FixedPolicy("model", 3))
    free = {tuple(dec.generate(PROMPT, max_tokens=20, sp=SamplingParams(1.0)).tokens)
            for _ in range(5)}  # fmt: skip
    assert len(free) > 1
    sp = SamplingParams(1.0, seed=5)
    assert (
        dec.generate(PROMPT, max_tokens=20, sp=sp).tokens == plain(rt, max_tokens=20, sp=sp).tokens
    )


@pytest.mark.parametrize("sp", SEEDED, ids=SEEDED_IDS)
def test_a_model_drafter_that_is_the_target_is_always_accepted_under_gumbel(sp):
    """Draft and target take the argmax of the same numbers at the same position, so every
    draft token is accepted: a drafter keyed to the wrong position would be rejected often."""
    rt = FakeRuntime(n_vocab=8, n_ctx=256, seed=7, scale=1.5)
    rt.eog = 999
    twin = ModelDrafter(FakeRuntime(n_vocab=8, n_ctx=256, seed=7, scale=1.5))
    out = SpeculativeDecoder(rt, [twin], FixedPolicy("model", 4)).generate(
        PROMPT, max_tokens=40, sp=sp
    )
    assert out.stats.n_draft_tokens >= 30
    assert out.stats.acceptance_rate == 1.0


def test_the_rejection_sampler_stays_selectable_and_seeded():
    """--sampler rejection: the model drafter draws from q and reports it (Leviathan et al.);
    with a fixed k a seeded request repeats."""
    rt, model = far_pair()
    dec = SpeculativeDecoder(rt, [model], FixedPolicy("model", 3))
    sp = SamplingParams(1.0, seed=9, sampler="rejection")
    a = dec.generate(PROMPT, max_tokens=30, sp=sp)
    assert dec.generate(PROMPT, max_tokens=30, sp=sp).tokens == a.tokens
    assert 0 < a.stats.acceptance_rate < 1


def test_text_stream_never_splits_utf8_and_holds_back_stop_prefixes():
    data = "héllo ✓ END tail".encode()
    stream = TextStream(stop=["END"])
    pieces = [stream.push(bytes([b])) for b in data]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) + stream.finish() == "héllo ✓ "
    assert stream.stopped


def test_stop_string_truncates_output():
    rt = FakeRuntime(n_vocab=16, n_ctx=128)
    rt.eog = 999
    ref = plain(rt, max_tokens=30)
    stop = ref.text[10:13]
    out = plain(rt, max_tokens=30, stop=[stop])
    assert out.finish_reason == "stop"
    assert out.text == ref.text[: ref.text.index(stop)]


def test_streaming_events_concatenate_to_generate():
    rt = FakeRuntime(n_vocab=16, n_ctx=128)
    dec = SpeculativeDecoder(rt, [NgramDrafter()], FixedPolicy("ngram", 4))
    events = list(dec.stream(PROMPT, max_tokens=25))
    full = dec.generate(PROMPT, max_tokens=25)
    assert "".join(e.text for e in events) == full.text
    assert list(itertools.chain.from_iterable(e.tokens for e in events)) == full.tokens
    assert events[-1].finish_reason == full.finish_reason


def test_a_model_drafter_reports_catching_up_apart_from_drafting():
    """After idle steps the draft model must forward what it missed: a one-off the policy
    leaves out of the per-token draft cost (else one probe would price the drafter out)."""
    from edgespec.drafters import ModelDrafter

    drafter = ModelDrafter(FakeRuntime(n_ctx=64, seed=3))
    greedy = SamplingParams()
    context = list(range(1, 30))
    first = drafter.propose(context, 3, greedy)
    assert first.t_catch_up > 0.0  # 29 tokens it had never seen
    context += [*first.tokens.tolist(), 5]  # all accepted, then the bonus token
    steady = drafter.propose(context, 3, greedy)
    assert steady.t_catch_up == 0.0
    context += [7, 8, 9, 10, 11]  # five tokens emitted by other steps
    assert drafter.propose(context, 3, greedy).t_catch_up > 0.0


def test_a_model_drafter_reports_the_distribution_it_sampled_from():
    """q must be the distribution each draft token was drawn from, top-p cut and renormalized
    included: a q that differs from it biases acceptance. Bound: each cell of the first
    token's frequencies within 5 standard errors of q (N = 4000)."""
    from edgespec.drafters import ModelDrafter

    draft_rt = FakeRuntime(n_vocab=6, n_ctx=64, seed=3, scale=1.5)
    oracle = FakeRuntime(n_vocab=6, n_ctx=64, seed=3, scale=1.5)
    sp = SamplingParams(temperature=1.0, top_p=0.7, sampler="rejection")
    drafter = ModelDrafter(draft_rt, seed=0)
    context = [1, 2, 1, 2]
    q0 = logits_to_probs(oracle.logits_after(context), sp)
    assert 0 < np.count_nonzero(q0) < len(q0)  # top-p cuts some tokens, keeps several
    n = 4000
    counts = np.zeros(len(q0))
    for _ in range(n):
        draft = drafter.propose(context, 2, sp)
        assert draft.q is not None
        np.testing.assert_array_equal(draft.q[0], q0)
        after = logits_to_probs(oracle.logits_after([*context, int(draft.tokens[0])]), sp)
        np.testing.assert_array_equal(draft.q[1], after)
        counts[draft.tokens[0]] += 1
    se = np.sqrt(q0 * (1 - q0) / n)
    assert np.all(np.abs(counts / n - q0) <= 5 * se + 1e-12), (counts / n, q0)


def test_a_drafters_observed_time_is_its_proposal_alone_not_the_plan():
    """Planning is the loop's time, paid by plain steps too: the policy learns a drafter's
    price from its proposal alone (one second a token here, the plan five), and the step's
    stats count the plan as neither drafting nor verifying."""
    clock = types.SimpleNamespace(now=0.0)

    class SlowPlan(FixedPolicy):
        observed: list[tuple[int, float]] = []

        def plan(self, context, sp, offers):
            clock.now += 5.0
            return super().plan(context, sp, offers)

        def observe(self, drafter, k, n_accepted, t_draft, t_verify, unsure_end=False, t_first=0.0):
            self.observed.append((k, t_draft))

    class OneSecondATokenDrafter(ScriptedDrafter):
        def propose(self, context, k, sp):
            clock.now += float(k)
            return super().propose(context, k, sp)

    rt = FakeRuntime()
    drafters = [OneSecondATokenDrafter(rt, None)]
    decoder = SpeculativeDecoder(rt, drafters, SlowPlan("scripted", 3), clock=lambda: clock.now)
    result = decoder.generate(PROMPT, max_tokens=9)
    assert result.stats.n_steps == 2  # the second step emits the stop token
    assert SlowPlan.observed == [(3, 3.0), (3, 3.0)]
    assert (result.stats.t_draft, result.stats.t_loop) == (6.0, 10.0)  # two plans, 5 each


def test_a_model_drafter_times_its_first_token_apart_from_a_catch_up():
    """Draft.t_first is the pass that drafted the first token (the re-read of the target's
    token included); after idle steps that pass is a catch-up, priced apart, so t_first 0.
    A clock ticking 1 a reading: the first pass reads it twice."""
    ticks = itertools.count()
    drafter = ModelDrafter(FakeRuntime(n_ctx=64, seed=3), clock=lambda: float(next(ticks)))
    context = [1, 2, 3, 4, 5, 6]
    far = drafter.propose(context, 3, SamplingParams())  # 6 behind: a catch-up
    assert (far.t_catch_up, far.t_first) == (1.0, 0.0)
    near = drafter.propose([*context, *far.tokens[:2].tolist()], 3, SamplingParams())
    assert (near.t_catch_up, near.t_first) == (0.0, 1.0)
