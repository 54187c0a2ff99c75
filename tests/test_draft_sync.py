"""Keeping a draft model in step (ModelDrafter.sync, Policy.to_sync) on real llama.cpp models:
the prompt is prefilled when a request begins, idle steps are caught up in one batched pass,
and a synced drafter proposes what a fresh one would. Output stays the target's own."""

from __future__ import annotations

import numpy as np

from edgespec.chat import chat_tokens
from edgespec.controller import AdaptivePolicy, CostCurve, FixedPolicy
from edgespec.drafters import ModelDrafter, NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.sampling import SamplingParams

GREEDY = SamplingParams()
# ONNX Runtime CPU-like: a 2-token verify costs 1.04 one-token passes, each token more ~0.06;
# the draft model 0.45 of the target per token (the demo pair's measured ratios)
ONNX_CPU = [1.0, 1.04, 1.1, 1.16, 1.22, 1.28, 1.34, 1.4, 1.46]


class Counting:
    """A real runtime, with the width of every forward pass recorded (forward_top's too)."""

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self.widths: list[int] = []

    def forward(self, tokens, *, last_only=False):
        self.widths.append(len(tokens))
        return self.runtime.forward(tokens, last_only=last_only)

    def forward_top(self, tokens, **options):  # a greedy draft's pass (llama.cpp's buffer)
        self.widths.append(len(tokens))
        return self.runtime.forward_top(tokens, **options)

    def forward_dists(self, tokens, sp, **options):  # a sampled draft's pass (its buffer too)
        self.widths.append(len(tokens))
        return self.runtime.forward_dists(tokens, sp, **options)

    def __getattr__(self, name):
        return getattr(self.runtime, name)


def prompt_of(target, text: str) -> list[int]:
    return chat_tokens(target, [{"role": "user", "content": text}])


def test_a_synced_drafter_proposes_what_a_fresh_one_does_after_one_token(tiny_runtimes):
    target, draft = tiny_runtimes
    prompt = prompt_of(target, "the theme of the week, in the ether")
    fresh = ModelDrafter(draft)
    fresh.reset(np.random.default_rng(0))
    want = fresh.propose(prompt, 4, GREEDY).tokens.tolist()

    counting = Counting(draft)
    synced = ModelDrafter(counting)
    synced.reset(np.random.default_rng(0))
    synced.sync(prompt)
    assert counting.widths == [len(prompt) - 1]  # the prompt in one batched pass
    assert synced.behind(prompt) == 1 and draft.n_past == len(prompt) - 1
    synced.sync(prompt)  # already in step: nothing forwarded
    assert counting.widths == [len(prompt) - 1]
    got = synced.propose(prompt, 4, GREEDY)
    assert got.tokens.tolist() == want
    assert counting.widths[1:] == [1, 1, 1, 1]  # the last token, then one per draft token
    assert got.t_catch_up == 0.0


def test_sync_rolls_back_what_the_context_no_longer_holds(tiny_runtimes):
    """After a rejected draft (its tokens cached past the context's end) and emitted tokens
    the draft never saw, one pass forwards only what follows the common prefix."""
    target, draft = tiny_runtimes
    prompt = prompt_of(target, "def add(a, b):")
    counting = Counting(draft)
    drafter = ModelDrafter(counting)
    drafter.reset(np.random.default_rng(0))
    drafted = drafter.propose(prompt, 3, GREEDY).tokens.tolist()
    later = prompt + [drafted[0], (drafted[1] + 1) % draft.n_vocab, 5, 6, 7]
    counting.widths.clear()
    drafter.sync(later)
    assert counting.widths == [len(later) - 1 - (len(prompt) + 1)]
    assert draft.n_past == len(later) - 1  # the rejected draft token rolled back
    got = drafter.propose(later, 3, GREEDY).tokens.tolist()
    fresh = ModelDrafter(draft)  # the same runtime, from an empty cache
    fresh.reset(np.random.default_rng(0))
    assert got == fresh.propose(later, 3, GREEDY).tokens.tolist()


def test_with_prompt_cache_reuse_the_next_request_prefills_only_what_is_new(tiny_runtimes):
    target, draft = tiny_runtimes
    first = prompt_of(target, "def add(a, b):")
    counting = Counting(draft)
    drafter = ModelDrafter(counting, keep_cache=True)
    dec = SpeculativeDecoder(target, [drafter], FixedPolicy("model", 3), reuse_cache=True)
    out = dec.generate(first, max_tokens=12)
    follow = first + out.tokens + target.tokenize(" and then", special=False)
    counting.widths.clear()
    again = dec.generate(follow, max_tokens=12)
    # the draft's prefill covers what follows the cached prefix, not the whole conversation
    assert 0 < counting.widths[0] < len(first)
    plain = SpeculativeDecoder(target).generate(follow, max_tokens=12, speculative=False)
    assert again.tokens == plain.tokens


def test_auto_uses_a_draft_model_on_a_long_prompt_and_keeps_the_output(tiny_runtimes):
    """A draft model that pays in step but not 60 tokens behind: prefilled with the prompt
    at the start, the adaptive policy drafts with it (it was never chosen when the whole
    prompt was priced as catch-up), and the output is plain decoding's."""
    target, draft = tiny_runtimes
    prompt = prompt_of(target, "the theme of the week " * 8)
    assert len(prompt) > 60
    counting = Counting(draft)
    drafter = ModelDrafter(counting, token_s=0.45)
    curve = CostCurve(list(ONNX_CPU), draft_s=0.45)
    curve.smoothing = 0.0  # wall times on a shared machine must not move the choices
    policy = AdaptivePolicy(curve, k_max=8)
    dec = SpeculativeDecoder(target, [drafter, NgramDrafter()], policy)
    out = dec.generate(prompt, max_tokens=40)
    assert counting.widths[0] == len(prompt) - 1  # prefilled when the request began
    assert out.stats.steps_by_drafter.get("model", 0) > 0
    assert max(counting.widths[1:]) < 20  # never caught up on tens of tokens at once
    plain = SpeculativeDecoder(target).generate(prompt, max_tokens=40, speculative=False)
    assert out.tokens == plain.tokens


def test_on_a_one_graph_runtime_the_draft_forwards_one_token_a_pass(tiny_runtimes):
    """After a draft kept whole the draft model lacks its last proposal and the bonus token:
    one 2-token pass, or, where its runtime replays one CUDA graph (keeps_one_graph), two
    one-token passes, which replay it where a 2-token pass would run uncaptured and make the
    next two passes run uncaptured and capture. The output is the target's either way."""
    target, draft = tiny_runtimes
    prompt = prompt_of(target, "the theme of the week, in the ether, the theme")
    plain = SpeculativeDecoder(target).generate(prompt, max_tokens=24, speculative=False)
    widths = {}
    for told in (False, True):
        counting = Counting(draft)
        counting.keeps_one_graph = told
        decoder = SpeculativeDecoder(target, [ModelDrafter(counting)], FixedPolicy("model", 1))
        out = decoder.generate(prompt, max_tokens=24)
        assert out.tokens == plain.tokens
        assert out.stats.n_accepted > 0
        widths[told] = counting.widths[1:]  # after the prompt's pass
    assert 2 in widths[False]
    assert set(widths[True]) == {1} and len(widths[True]) > len(widths[False])


class WatchedContext(list):
    """The engine's context list, recording where each slice taken of it starts."""

    def __init__(self, tokens):
        super().__init__(tokens)
        self.starts: list[int] = []

    def __getitem__(self, i):
        if isinstance(i, slice):
            self.starts.append(i.start or 0)
        return super().__getitem__(i)


def test_a_draft_caches_common_prefix_with_the_growing_context_compares_only_its_tail():
    """The engine appends to one list a request: a prefix found equal stays equal, so a
    step compares only what follows it. Appending draft tokens in place keeps what is known;
    a new list (truncated, then other tokens), or another context list, is compared whole."""
    from edgespec.drafters.model import CachedTokens, common_prefix_len

    cache = CachedTokens()
    context = WatchedContext(range(100, 1100))  # 1,000 tokens
    cache.cached = list(range(100, 1100))
    assert cache.common_prefix(context) == 1000
    context.append(7)
    context.starts.clear()
    assert cache.common_prefix(context) == 1000
    assert context.starts == [1000]  # the tail alone
    cache.cached.extend([8, 9])  # a draft's own tokens, the first of them wrong
    assert cache.common_prefix(context) == 1000
    cache.cached = cache.cached[:990] + [5] * 20  # another list: compared whole
    assert cache.common_prefix(context) == 990 == common_prefix_len(cache.cached, context)
    other = list(context)
    other[3] = 1
    assert cache.common_prefix(other) == 3  # another context list: compared whole
    assert cache.common_prefix(context, offset=1) == common_prefix_len(cache.cached, context[1:])
    cache.cache_context(context, 1001)
    context.starts.clear()
    assert cache.common_prefix(context) == 1001 and context.starts == [1001]
