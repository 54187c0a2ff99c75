"""ModelDrafter's confidence: a greedy or seeded Gumbel draft runs while the draft model is
sure of each token and ends with its first unsure one, on a real llama.cpp model; output stays
the target's."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.chat import chat_tokens
from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.runtime import top_of
from edgespec.sampling import SamplingParams, token_dist

GREEDY = SamplingParams()


def prompt_of(runtime, text: str) -> list[int]:
    return chat_tokens(runtime, [{"role": "user", "content": text}])


def greedy_chain(draft, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """The draft model's own greedy continuation and its probability of each token."""
    draft.reset()
    logits = draft.forward(prompt, last_only=True)[-1]
    tokens, probs = [], []
    for _ in range(n):
        tokens.append(int(np.argmax(logits)))
        probs.append(float(top_of(logits[None]).prob[0]))
        logits = draft.forward([tokens[-1]], last_only=True)[-1]
    draft.reset()
    return tokens, probs


def test_top_probability_is_the_softmax_of_the_largest_logit():
    logits = np.array([[2.0, 0.5, -1.0, 2.0 - np.log(3.0)], [0.0, 3.0, 3.0, 1.0]], np.float32)
    e = np.exp(logits.astype(np.float64))
    top = top_of(logits)
    assert top.ids.tolist() == [0, 1]  # the first of two equal maxima, as ONNX's ArgMax
    assert top.prob.tolist() == pytest.approx((e.max(1) / e.sum(1)).tolist(), rel=1e-6)


def test_top_probability_in_a_reused_array_is_the_formulas_bit_for_bit():
    """top_of computes in an array it keeps per shape and thread (scratch): each call's
    probabilities are its own rows', bit for bit those of a fresh computation, whatever the
    call before held, float32 and float64 alike."""
    rng = np.random.default_rng(3)
    for dtype in (np.float32, np.float64):
        rows = [(rng.standard_normal((3, 5_000)) * scale).astype(dtype) for scale in (1, 4, 9)]
        got = [top_of(r).prob for r in rows]
        for r, prob in zip(rows, got):
            fresh = 1.0 / np.exp(r - r.max(axis=-1, keepdims=True)).sum(axis=-1)
            assert prob.tobytes() == fresh.astype(np.float32).tobytes()


def test_a_draft_ends_with_its_first_unsure_token_before_the_k_asked(tiny_runtimes):
    _, draft = tiny_runtimes
    prompt = prompt_of(draft, "the theme of the week, in the ether")
    chain, probs = greedy_chain(draft, prompt, 16)
    # a threshold between the chain's probabilities, so the gate stops inside it
    confidence = float(np.median(probs))
    unsure = next(i for i, p in enumerate(probs) if p < confidence)
    for k in (unsure + 1, 16):
        drafter = ModelDrafter(draft, confidence=confidence)
        drafter.reset(np.random.default_rng(0))
        got = drafter.propose(prompt, k, GREEDY)
        assert got.tokens.tolist() == chain[: unsure + 1]  # the unsure token is the last
        # the cache holds the prompt and every drafted token but the last (never forwarded)
        assert draft.n_past == len(prompt) + unsure
        assert drafter.cached == prompt + chain[:unsure]
    sure = ModelDrafter(draft, confidence=min(probs) / 2)
    sure.reset(np.random.default_rng(0))
    assert sure.propose(prompt, 5, GREEDY).tokens.tolist() == chain[:5]  # k is the cap
    assert sure.propose(prompt, 0, GREEDY).tokens.tolist() == []  # k = 0 stays a plain step


SEEDED = SamplingParams(temperature=0.8, seed=5, sampler="gumbel")


def gumbel_chain(draft, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """The draft model's own seeded Gumbel continuation and each token's margin."""
    draft.reset()
    logits = draft.forward(prompt, last_only=True)[-1]
    tokens, margins = [], []
    for i in range(n):
        token, margin = token_dist(logits, SEEDED).gumbel_max_margin(5, len(prompt) + i)
        tokens.append(token)
        margins.append(margin)
        logits = draft.forward([token], last_only=True)[-1]
    draft.reset()
    return tokens, margins


def test_a_gumbel_draft_ends_with_its_first_token_won_by_a_small_margin(tiny_runtimes):
    """Seeded sampling: a token is unsure where its perturbed score leads the runner-up's
    by less than log(c / (1 - c)); the draft ends there, before the k asked for."""
    _, draft = tiny_runtimes
    prompt = prompt_of(draft, "the theme of the week, in the ether")
    chain, margins = gumbel_chain(draft, prompt, 16)
    cut = float(np.median(margins))  # a margin inside the chain, so the gate stops in it
    unsure = next(i for i, m in enumerate(margins) if m < cut)
    confidence = 1.0 / (1.0 + np.exp(-cut))  # log(c / (1 - c)) = cut
    for k in (unsure + 1, 16):
        drafter = ModelDrafter(draft, confidence=confidence)
        drafter.reset(np.random.default_rng(0))
        got = drafter.propose(prompt, k, SEEDED)
        assert got.tokens.tolist() == chain[: unsure + 1] and got.unsure_end
        assert got.q is None and got.gumbel
    ungated = ModelDrafter(draft)
    ungated.reset(np.random.default_rng(0))
    assert ungated.propose(prompt, 16, SEEDED).tokens.tolist() == chain


def test_seeded_output_with_gated_gumbel_drafts_is_plain_decodings(tiny_runtimes):
    target, draft = tiny_runtimes
    prompt = prompt_of(target, "the theme of the week, in the ether")
    plain = SpeculativeDecoder(target, [], FixedPolicy(None, 0))
    want = plain.generate(prompt, max_tokens=60, sp=SEEDED).tokens
    _, margins = gumbel_chain(draft, prompt, 16)
    confidence = 1.0 / (1.0 + np.exp(-float(np.median(margins))))
    spec = SpeculativeDecoder(target, [ModelDrafter(draft, confidence=confidence)],
                              FixedPolicy("model", 8))  # fmt: skip
    result = spec.generate(prompt, max_tokens=60, sp=SEEDED)
    assert result.tokens == want
    stats = result.stats  # drafts ended early, none longer than 8
    assert stats.n_drafts < stats.n_draft_tokens < 8 * stats.n_drafts


def test_sampled_drafts_keep_the_k_asked_for(tiny_runtimes):
    _, draft = tiny_runtimes
    prompt = prompt_of(draft, "the theme of the week, in the ether")
    drafter = ModelDrafter(draft, confidence=0.99)
    drafter.reset(np.random.default_rng(0))
    sampled = SamplingParams(temperature=0.8, sampler="rejection")
    got = drafter.propose(prompt, 3, sampled)
    assert len(got.tokens) == 3 and got.q is not None and got.q.shape[0] == 3


def test_confidence_outside_0_1_is_refused(tiny_runtimes):
    _, draft = tiny_runtimes
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match=f"confidence must be in \\[0, 1\\), got {bad}"):
            ModelDrafter(draft, confidence=bad)


def test_output_with_confident_drafts_is_plain_decodings(tiny_runtimes):
    target, draft = tiny_runtimes
    prompt = prompt_of(target, "the theme of the week, in the ether")
    plain = SpeculativeDecoder(target, [], FixedPolicy(None, 0)).generate(prompt, max_tokens=60)
    _, probs = greedy_chain(draft, prompt, 16)
    drafter = ModelDrafter(draft, confidence=float(np.median(probs)))
    spec = SpeculativeDecoder(target, [drafter], FixedPolicy("model", 8))
    result = spec.generate(prompt, max_tokens=60)
    assert result.tokens == plain.tokens
    stats = result.stats  # drafts of every length from 1 to 8 tokens, none longer
    assert stats.n_drafts < stats.n_draft_tokens < 8 * stats.n_drafts
