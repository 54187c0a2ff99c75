"""The loop's logic on a deterministic fake runtime. Real-model tests are in test_llamacpp.py."""

import itertools

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import ContextOverflowError, EdgespecError
from edgespec.sampling import SamplingParams, logits_to_probs
from edgespec.textstream import TextStream
from tests.fakes import FakeRuntime, ScriptedDrafter

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


def test_rollback_leaves_the_cache_holding_the_context_but_the_last_token():
    """After every step the target's cache is exactly prompt + emitted minus the last token
    (the invariant): a rejected draft token never stays, an accepted one never goes."""
    rt = FakeRuntime(n_ctx=128)
    rt.eog = 999
    drafter = ScriptedDrafter(FakeRuntime(), wrong_at=1)  # 1 accepted, then a rejection
    dec = SpeculativeDecoder(rt, [drafter], FixedPolicy("scripted", 4))
    context = list(PROMPT)
    for event in dec.stream(PROMPT, max_tokens=9):
        context += event.tokens
        assert rt.cache == context[:-1]
    assert context[len(PROMPT) :] == plain(rt, max_tokens=9).tokens


def test_sampling_is_seeded_and_deterministic():
    rt = FakeRuntime(n_vocab=16, n_ctx=128)
    sp = SamplingParams(temperature=0.8, top_k=8, seed=42)
    dec = SpeculativeDecoder(rt, [NgramDrafter(2)], FixedPolicy("ngram", 4))
    a = dec.generate(PROMPT, max_tokens=30, sp=sp).tokens
    assert dec.generate(PROMPT, max_tokens=30, sp=sp).tokens == a


class SampledFakeDrafter:
    """Draws from a distribution far from the target's and reports it as q."""

    name = "far"

    def __init__(self, n_vocab, seed=0):
        self.rng = np.random.default_rng(seed)
        self.q = np.random.default_rng(99).dirichlet(np.ones(n_vocab) * 0.2).astype(np.float32)

    def propose(self, context, k, sp):
        from edgespec.drafters import Draft

        tokens = self.rng.choice(len(self.q), size=k, p=self.q / self.q.sum()).astype(np.int32)
        return Draft(tokens, np.tile(self.q, (k, 1)))

    def accept(self, n):
        pass

    def reset(self, rng):
        pass


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_k=3),
        SamplingParams(temperature=1.3, top_p=0.8),
    ],
    ids=["t1", "t0.7-topk3", "t1.3-topp0.8"],
)
@pytest.mark.parametrize("drafter", ["far", "ngram"])
def test_speculative_sampling_matches_target_joint_distribution(sp, drafter):
    """The joint law of the first two emitted tokens equals the target's exact one.

    Bound: each of the V*V cells within 5 standard errors of its exact probability; with
    N = 6000 draws a cell's false-failure probability is < 6e-7."""
    n_vocab, n = 5, 6000
    rt = FakeRuntime(n_vocab=n_vocab, n_ctx=64, seed=7, scale=1.5)
    rt.eog = 999
    prompt = [1, 2, 1, 2, 1]
    p1 = logits_to_probs(rt.logits_after(prompt), sp)
    exact = np.array(
        [p1[a] * logits_to_probs(rt.logits_after([*prompt, a]), sp) for a in range(n_vocab)]
    )
    d = SampledFakeDrafter(n_vocab) if drafter == "far" else NgramDrafter(2)
    dec = SpeculativeDecoder(rt, [d], FixedPolicy(d.name, 3))
    counts = np.zeros((n_vocab, n_vocab))
    for seed in range(n):
        tokens = dec.generate(
            prompt,
            max_tokens=2,
            sp=SamplingParams(sp.temperature, sp.top_k, sp.top_p, sp.min_p, seed),
        ).tokens
        counts[tokens[0], tokens[1]] += 1
    freq = counts / n
    se = np.sqrt(exact * (1 - exact) / n)
    assert np.all(np.abs(freq - exact) <= 5 * se + 1e-12), np.abs(freq - exact).max()


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
    sp = SamplingParams(temperature=1.0, top_p=0.7)
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
