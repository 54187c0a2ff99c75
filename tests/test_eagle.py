"""EAGLE-3 heads on llama.cpp (runtimes/llama_heads.py, edgespec/drafters/head.py), on a tiny
target and a tiny random head made in the test: the target's kept hidden states, the head's
fc layer, speculative output equal to plain decoding (greedy and seeded, k = 1..8, --exact
kernels), the head's state after every rollback equal to a fresh head's, and refusals."""

from pathlib import Path

import numpy as np
import pytest

from edgespec.backends import EXACT_LLAMA
from edgespec.controller import FixedPolicy
from edgespec.drafters.head import HeadDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.runtime import Runtime
from edgespec.runtimes.llama_heads import ext
from edgespec.runtimes.llamacpp import LlamaCppRuntime, LlamaOptions
from edgespec.runtimes.shared import HeadMismatchError
from edgespec.sampling import SamplingParams
from tests.tiny_eagle import (
    TARGET,
    head_weights,
    reference_logits,
    write_head,
    write_target_and_head,
)
from tests.tiny_gguf import random_weights, vocabulary

CFG = TARGET
PROMPT = "<|im_start|>user\ndef the rest(a, b):\n    return a<|im_end|>\n<|im_start|>assistant\n"
SEEDED = [SamplingParams(1.0, seed=1), SamplingParams(0.7, top_p=0.9, seed=2)]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    return write_target_and_head(tmp_path_factory.mktemp("eagle"))


def open_target(path: Path) -> LlamaCppRuntime:
    return LlamaCppRuntime(path, n_ctx=256, n_threads=1, options=LlamaOptions(**EXACT_LLAMA))


@pytest.fixture(scope="module")
def pair(files):
    target = open_target(files[0])
    return target, target.open_head(str(files[1]))


@pytest.fixture(scope="module")
def reference(pair):
    return plain_reference(pair[0])


def plain_reference(target: Runtime):
    """PROMPT's tokens and the target's plain greedy decoding of them (40 tokens)."""
    tokens = target.tokenize(PROMPT, special=True)
    ref = SpeculativeDecoder(target).generate(tokens, max_tokens=40, speculative=False)
    assert len(ref.tokens) >= 16, "the tiny model should not stop at once"
    return tokens, ref


def test_hidden_states_are_layer_inputs_kept_by_position(files, tmp_path):
    """Layer 0's input is the token embedding; a pass's rows are kept at their positions,
    whatever rows it returned, and equal one batched pass's."""
    target = open_target(files[0])
    head = target.open_head(str(write_head(tmp_path / "h.gguf", CFG, layers=(0, 1, 3))))
    tokens = target.tokenize(PROMPT, special=True)
    target.forward(tokens)
    whole = target.features(0, len(tokens))
    assert whole.shape == (len(tokens), 3 * CFG.n_embd)
    embd = random_weights(CFG, len(vocabulary()[0]), 0)["token_embd.weight"]
    np.testing.assert_allclose(whole[:, : CFG.n_embd], embd[tokens], rtol=0, atol=1e-6)
    target.rollback(3)
    target.forward(tokens[3:10], last_only=True)
    target.forward(tokens[10:11])
    np.testing.assert_allclose(target.features(0, 11), whole[:11], rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="no hidden states kept for positions 5..11"):
        target.features(5, 12)
    # the head's fc layer: g = fc @ features
    fc = head_weights(CFG.n_embd, head.n_vocab, 7)["fc.weight"]
    np.testing.assert_allclose(head.encode(whole), whole @ fc.T, rtol=1e-4, atol=1e-4)


def test_head_passes_equal_the_numpy_reference(pair, reference):
    """The head's logits for one pass over many rows, and for the same rows in two passes,
    equal src/models/eagle3.cpp's decoder in numpy (pairs (token P + 1, g P))."""
    target, head = pair
    check_head_matches_reference(target, head, reference[0], atol=0.02)


def check_head_matches_reference(target: Runtime, head, tokens: list[int], atol: float) -> None:
    """fc over the target's features, then the decoder's last row for one pass over many
    rows and for the same rows in two passes, against tiny_eagle's numpy reference."""
    n = len(tokens)
    put_target_at(target, tokens)
    features = target.features(0, n - 1)
    w = head_weights(CFG.n_embd, head.n_vocab, 7)
    g = head.encode(features)
    np.testing.assert_allclose(g, features @ w["fc.weight"].T, rtol=1e-4, atol=1e-4)
    embd = random_weights(CFG, head.n_vocab, 0)["token_embd.weight"]
    want = reference_logits(w, embd, tokens[1:], g.astype(np.float64), CFG)
    head.reset()
    whole, _ = head.decode(tokens[1:], g)
    np.testing.assert_allclose(whole, want[-1], rtol=0, atol=atol)
    head.reset()
    head.decode(tokens[1:5], g[:4])
    split, _ = head.decode(tokens[5:], g[4:])
    np.testing.assert_allclose(split, want[-1], rtol=0, atol=atol)


@pytest.mark.parametrize("k", range(1, 9))
def test_greedy_and_seeded_output_equal_plain(pair, reference, k):
    target, head = pair
    check_output_equals_plain(target, head, *reference, k)


def check_output_equals_plain(target: Runtime, head, tokens: list[int], ref, k: int) -> None:
    """Greedy output drafted by the head at k equals ref (plain greedy decoding's); seeded
    output equals plain decoding's with the same seed; the head drafted in each."""
    drafter = HeadDrafter(target, head)
    out = SpeculativeDecoder(target, [drafter], FixedPolicy(drafter.name, k)).generate(
        tokens, max_tokens=40
    )
    assert out.tokens == ref.tokens
    assert out.stats.n_draft_tokens > 0
    for sp in SEEDED:
        plain = SpeculativeDecoder(target).generate(tokens, max_tokens=32, sp=sp, speculative=False)
        out = SpeculativeDecoder(target, [drafter], FixedPolicy(drafter.name, k)).generate(
            tokens, max_tokens=32, sp=sp
        )
        assert out.tokens == plain.tokens, sp
        assert out.stats.n_draft_tokens > 0


def put_target_at(target: Runtime, context: list[int]) -> None:
    """The target's cache holding context[:-1], as the engine leaves it before a proposal."""
    target.reset()
    target.forward(context[:-1], last_only=True)


@pytest.mark.parametrize("sp", [SamplingParams(0.0), SEEDED[0]])
def test_rollback_at_every_position_leaves_a_fresh_heads_state(pair, files, reference, sp):
    """Each outcome of a k = 8 proposal (0..8 kept, then the recovered or bonus token): the
    next proposal equals a fresh head's on the same context, token for token."""
    target, head = pair
    check_rollback_leaves_a_fresh_state(target, head, target.open_head(str(files[1])),
                                        reference, sp)  # fmt: skip


def check_rollback_leaves_a_fresh_state(target: Runtime, head, fresh_head, reference, sp) -> None:
    tokens, ref = reference
    text = tokens + ref.tokens
    n0 = len(tokens) + 2
    fresh = HeadDrafter(target, fresh_head)
    drafter = HeadDrafter(target, head)
    for n_kept in range(9):
        after = text[: n0 + n_kept + 1]
        put_target_at(target, after)
        fresh.reset(np.random.default_rng(0))
        want = fresh.propose(after, 8, sp).tokens.tolist()
        got = drafter_after(drafter, text[:n0], after, sp)
        assert got == want, n_kept
        assert head.n_past == len(after) - 1 + 7  # true rows, then the draft's own


def drafter_after(drafter, before, after, sp) -> list[int]:
    """A proposal at `before`, its outcome leaving `after`, then the next proposal."""
    target = drafter.target
    drafter.reset(np.random.default_rng(0))
    put_target_at(target, before)
    drafter.propose(before, 8, sp)
    put_target_at(target, after)
    return drafter.propose(after, 8, sp).tokens.tolist()


def test_sync_then_propose_equals_propose(pair, reference):
    target, head = pair
    tokens, ref = reference
    context = tokens + ref.tokens[:10]
    put_target_at(target, context)
    drafter = HeadDrafter(target, head)
    drafter.reset(np.random.default_rng(0))
    direct = drafter.propose(context, 6, SamplingParams(0.0)).tokens.tolist()
    drafter.reset(np.random.default_rng(0))
    drafter.sync(context)
    assert drafter.behind(context) == 1 and head.n_past == len(context) - 2
    assert drafter.propose(context, 6, SamplingParams(0.0)).tokens.tolist() == direct


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hidden": 32}, r"head\.gguf reads hidden states of size 32 but target\.gguf has 64"),
        ({"layers": (1, 2, 4)}, r"extracts layers \[1, 2, 4\] but target\.gguf has layers 0\.\.3"),
        ({"n_vocab": 270}, r"vocabulary of 270 tokens but target\.gguf has 279"),
    ],
)
def test_a_head_that_does_not_fit_is_refused(files, tmp_path, kwargs, message):
    target = open_target(files[0])
    bad = write_head(tmp_path / "head.gguf", CFG, **kwargs)
    with pytest.raises(HeadMismatchError, match=message):
        target.open_head(str(bad))


def test_the_head_context_took_the_target_as_ctx_other(pair):
    """llama-cpp-python's llama_context_params layout agrees with the library's: the field
    set last (ctx_other) is what llama.cpp reads back, and the defaults read sanely."""
    target, head = pair
    lib = target.llama
    assert ext(lib).get_ctx_other(head.ctx) == target.ctx  # type: ignore[attr-defined]
    assert ext(lib).get_ctx_other(target.ctx) is None  # type: ignore[attr-defined]
    defaults = lib.llama_context_default_params()
    assert (defaults.n_ctx, defaults.n_ubatch, defaults.n_seq_max) == (512, 512, 1)
    assert not defaults.ctx_other and not defaults.embeddings


def test_a_target_model_is_not_a_head(files):
    target = open_target(files[0])
    with pytest.raises(HeadMismatchError, match=r"a 'llama' model, not an EAGLE-3 head"):
        target.open_head(str(files[0]))


def test_the_head_is_placed_where_the_target_is(pair):
    """A target on the CPU keeps its head on the CPU (llama.cpp's default would offload it on
    a GPU build, copying the features across every draft)."""
    target, head = pair
    assert (target.n_gpu_layers, head.n_gpu_layers) == (0, 0)


def test_the_head_times_its_first_token_apart_from_a_catch_up(files, reference):
    """As a draft model: the boundary row's pass is the first token's price (Draft.t_first),
    unless it caught up on positions the head had not written."""
    tokens, _ = reference
    target = open_target(files[0])
    ticks = iter(range(1000))
    drafter = HeadDrafter(target, target.open_head(str(files[1])), clock=lambda: next(ticks))
    target.forward(tokens)
    far = drafter.propose(tokens, 2, SamplingParams())
    assert (far.t_catch_up, far.t_first) == (1.0, 0.0)
    target.forward([int(far.tokens[0])])
    near = drafter.propose([*tokens, int(far.tokens[0])], 2, SamplingParams())
    assert (near.t_catch_up, near.t_first) == (0.0, 1.0)
