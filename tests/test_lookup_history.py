"""Prompt lookup in recent completions (NgramDrafter history, `serve --lookup-history N`):
off by default, completions only (never prompts), bounded, and lossless."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import EdgespecError
from edgespec.loader import SpecOptions
from edgespec.sampling import SamplingParams

SP = SamplingParams()
RNG = np.random.default_rng(0)


def serve(d: NgramDrafter, prompt: list[int], completion: list[int]) -> None:
    """One request as the engine drives the drafter: the prompt, then the tokens emitted."""
    d.reset(RNG)
    d.offer(prompt)
    d.offer(prompt + completion)


def test_a_later_request_drafts_from_an_earlier_completion():
    d = NgramDrafter(max_ngram=2, history=4)
    serve(d, [1, 2, 3], [40, 41, 42, 43, 44])
    d.reset(RNG)
    assert d.propose([7, 8, 41, 42], 3, SP).tokens.tolist() == [43, 44]
    assert d.offer([7, 8, 41, 42]).key == 2


def test_the_context_wins_over_the_history():
    d = NgramDrafter(max_ngram=1, history=4)
    serve(d, [1], [5, 6])
    d.reset(RNG)
    assert d.propose([5, 9, 5], 1, SP).tokens.tolist() == [9]


def test_off_by_default_and_prompts_are_never_kept():
    d = NgramDrafter(max_ngram=2)
    serve(d, [1, 2, 3], [40, 41, 42])
    d.reset(RNG)
    assert d.propose([41, 42], 2, SP).tokens.tolist() == []
    d = NgramDrafter(max_ngram=2, history=4)
    serve(d, [60, 61, 62, 63], [40])
    d.reset(RNG)
    assert d.propose([9, 61, 62], 2, SP).tokens.tolist() == []  # 61 62 was prompt text


def test_the_history_keeps_the_last_n_completions():
    d = NgramDrafter(max_ngram=1, history=2)
    for first in (10, 20, 30):
        serve(d, [1], [first, first + 1])
    d.reset(RNG)
    assert [d.propose([9, t], 1, SP).tokens.tolist() for t in (10, 20, 30)] == [[], [21], [31]]


def test_the_option_is_checked():
    with pytest.raises(EdgespecError, match="--lookup-history must be >= 0"):
        SpecOptions(lookup_history=-1)


def test_greedy_output_with_history_equals_output_without(tiny_runtimes):
    target, _ = tiny_runtimes
    prompts = [target.tokenize(t, special=False) for t in ("def add(a, b):", "the theme", "def")]
    outputs = {}
    for history in (0, 8):
        dec = SpeculativeDecoder(target, [NgramDrafter(history=history)], FixedPolicy("ngram", 4))
        outputs[history] = [dec.generate(p * 2, max_tokens=24) for p in prompts]
    assert [r.tokens for r in outputs[8]] == [r.tokens for r in outputs[0]]
    # the third prompt's drafts came from the history too
    assert outputs[8][2].stats.n_draft_tokens >= outputs[0][2].stats.n_draft_tokens
