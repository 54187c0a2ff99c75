"""Prompt-cache reuse (SpeculativeDecoder reuse_cache, ModelDrafter keep_cache) on real
llama.cpp models: a request that shares a prefix with the last one prefills only the rest,
and its output equals a fresh decoder's, token for token (greedy), whatever the last request
left in the caches (finished, stopped early with drafts past the end, or closed mid-stream).
"""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.app.bench_runs import NEAR_TIE, first_departure, top2_gap
from edgespec.chat import chat_tokens
from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter, NgramDrafter
from edgespec.drafters.model import common_prefix_len
from edgespec.engine import SpeculativeDecoder
from edgespec.sampling import SamplingParams

TURNS = ["def add(a, b):", "the theme of the week", "in the ether"]


def decoder(runtimes, drafter: str, reuse: bool, k: int = 3) -> SpeculativeDecoder:
    target, draft = runtimes
    d = ModelDrafter(draft, keep_cache=reuse) if drafter == "model" else NgramDrafter()
    return SpeculativeDecoder(target, [d], FixedPolicy(drafter, k), reuse_cache=reuse)


def conversation(target, replies: list[str], n_turns: int) -> list[int]:
    messages = []
    for i in range(n_turns):
        messages.append({"role": "user", "content": TURNS[i]})
        if i < len(replies):
            messages.append({"role": "assistant", "content": replies[i]})
    return chat_tokens(target, messages)


def fresh(runtimes, drafter, prompt, **kwargs):
    return decoder(runtimes, drafter, reuse=False).generate(prompt, **kwargs)


@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_a_conversation_reuses_earlier_turns_and_matches_a_fresh_decoder(tiny_runtimes, drafter):
    target, _ = tiny_runtimes
    reusing = decoder(tiny_runtimes, drafter, reuse=True)
    replies: list[str] = []
    results = []
    for turn in range(3):
        prompt = conversation(target, replies, turn + 1)
        out = reusing.generate(prompt, max_tokens=24)
        results.append((prompt, out))
        replies.append(out.text)
    for turn, (prompt, out) in enumerate(results):
        if turn:  # the cache held the previous prompt and reply: the common prefix is reused
            before, previous = results[turn - 1]
            held = before + previous.tokens
            n_common = common_prefix_len(held, prompt)
            assert out.stats.n_cached == min(n_common, len(prompt) - 1) > len(before) // 2
        else:
            assert out.stats.n_cached == 0
    for prompt, out in results:  # fresh decoders, after the reusing one is done with the cache
        ref = fresh(tiny_runtimes, drafter, prompt, max_tokens=24)
        assert (out.tokens, out.text) == (ref.tokens, ref.text)
        assert out.finish_reason == ref.finish_reason


def test_reuse_off_prefills_everything(tiny_runtimes):
    target, _ = tiny_runtimes
    dec = decoder(tiny_runtimes, "model", reuse=False)
    prompt = conversation(target, [], 1)
    dec.generate(prompt, max_tokens=8)
    assert dec.generate(prompt, max_tokens=8).stats.n_cached == 0


def test_the_same_prompt_twice_prefills_nothing_and_gives_the_same_output(tiny_runtimes):
    target, _ = tiny_runtimes
    dec = decoder(tiny_runtimes, "model", reuse=True)
    prompt = conversation(target, [], 1)
    first = dec.generate(prompt, max_tokens=16)
    again = dec.generate(prompt, max_tokens=16)
    assert again.stats.n_cached == len(prompt) - 1
    assert again.tokens == first.tokens


@pytest.mark.parametrize("max_tokens", [1, 2, 5])
def test_a_step_cut_short_leaves_no_stale_tokens(tiny_runtimes, max_tokens):
    """max_tokens ends a step inside an accepted draft: the cache then holds tokens past the
    context's end, which the next request must not trust."""
    target, _ = tiny_runtimes
    dec = decoder(tiny_runtimes, "model", reuse=True, k=6)
    prompt = conversation(target, [], 1)
    cut = dec.generate(prompt, max_tokens=max_tokens)
    assert cut.finish_reason == "length"
    longer = dec.generate(prompt + cut.tokens, max_tokens=20)
    assert longer.stats.n_cached == len(prompt) + len(cut.tokens) - 1
    assert longer.tokens == fresh(tiny_runtimes, "model", prompt + cut.tokens, max_tokens=20).tokens


def test_a_generation_closed_mid_stream_leaves_caches_the_next_request_can_use(tiny_runtimes):
    target, _ = tiny_runtimes
    dec = decoder(tiny_runtimes, "model", reuse=True)
    prompt = conversation(target, [], 1)
    stream = dec.stream(prompt, max_tokens=40)
    got = [t for _, event in zip(range(2), stream) for t in event.tokens]
    stream.close()  # what the server does when a client disconnects
    follow = prompt + got + target.tokenize(" and then", special=False)
    out = dec.generate(follow, max_tokens=20)
    assert out.stats.n_cached >= len(prompt)
    assert out.tokens == fresh(tiny_runtimes, "model", follow, max_tokens=20).tokens


def test_the_model_drafter_keeps_its_cache_only_when_asked(tiny_runtimes):
    target, draft = tiny_runtimes
    prompt = conversation(target, [], 1)
    for keep, behind in [(True, 3), (False, len(prompt) + 3)]:
        drafter = ModelDrafter(draft, keep_cache=keep)
        drafter.reset(np.random.default_rng(0))
        drafter.propose(prompt, 2, SamplingParams())
        drafter.reset(np.random.default_rng(0))  # the next request
        assert drafter.behind(prompt + [5, 6, 7]) == behind


def test_sampled_output_with_reuse_equals_a_fresh_decoder_for_the_same_seed(tiny_runtimes):
    target, _ = tiny_runtimes
    sp = SamplingParams(temperature=0.8, top_k=40, seed=11)
    dec = decoder(tiny_runtimes, "model", reuse=True)
    first = dec.generate(conversation(target, [], 1), max_tokens=16, sp=sp)
    prompt = conversation(target, [first.text], 2)
    out = dec.generate(prompt, max_tokens=24, sp=sp)
    assert out.stats.n_cached > 0
    assert out.tokens == fresh(tiny_runtimes, "model", prompt, max_tokens=24, sp=sp).tokens


@pytest.mark.real
def test_reuse_on_the_demo_pair_equals_a_fresh_decoder_up_to_near_ties(demo_runtimes):
    """llama.cpp on CPU is not batch-invariant: the reused cache was filled by other batch
    shapes than a fresh prefill, so greedy outputs may part only at near-ties (NEAR_TIE)."""
    target, draft = demo_runtimes
    turns = [
        "Write a Python function that returns the n-th Fibonacci number iteratively.",
        "Now make it recursive with memoization.",
        "Add a docstring and type hints.",
    ]
    reusing = SpeculativeDecoder(
        target, [ModelDrafter(draft, keep_cache=True)], FixedPolicy("model", 4), reuse_cache=True
    )
    messages: list[dict[str, str]] = []
    runs = []
    for text in turns:
        messages.append({"role": "user", "content": text})
        prompt = chat_tokens(target, messages)
        out = reusing.generate(prompt, max_tokens=48)
        runs.append((prompt, out))
        messages.append({"role": "assistant", "content": out.text})
    assert [out.stats.n_cached > len(runs[0][0]) for _, out in runs[1:]] == [True, True]
    departures = []
    for prompt, out in runs:
        plain = SpeculativeDecoder(target, [ModelDrafter(draft)], FixedPolicy("model", 4))
        ref = plain.generate(prompt, max_tokens=48)
        i = first_departure(ref.tokens, out.tokens)
        if i is not None:
            gap = top2_gap(target, prompt + ref.tokens[:i])
            departures.append((i, gap))
            assert gap < NEAR_TIE, f"departure at {i} where the top-two gap is {gap:.3f}"
    assert len(departures) <= 1, departures
