"""A hybrid target (recurrent state beside a KV cache: LFM2, Qwen3.5) on llama.cpp, on a
tiny random LFM2 (short convolutions) and Qwen3.5 (gated delta nets) made in the test: a
rollback after a verify pass goes through llama.cpp's state snapshots, one cut back further
(or a second between passes) rebuilds the state from the tokens, and speculative output
equals plain decoding's. Before, a rejected draft left the recurrent state ahead of the cache
and the next pass failed ("llama_decode failed")."""

from pathlib import Path

import numpy as np
import pytest

from edgespec.backends import EXACT_LLAMA
from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter, NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.runtime import K_MAX, MAX_VERIFY_WIDTH
from edgespec.runtimes.llamacpp import LlamaCppRuntime, LlamaOptions
from edgespec.sampling import SamplingParams
from tests.tiny_hybrid import write_hybrid_target, write_qwen35_target

PROMPT = "<|im_start|>user\ndef the rest(a, b):\n    return a<|im_end|>\n<|im_start|>assistant\n"


WRITERS = {
    "lfm2": lambda path, seed=0: write_hybrid_target(path, seed=seed),
    "qwen35": lambda path, seed=1: write_qwen35_target(path, seed=seed),
}


@pytest.fixture(scope="module", params=list(WRITERS))
def target_file(tmp_path_factory, request) -> Path:
    return WRITERS[request.param](tmp_path_factory.mktemp("hybrid") / f"{request.param}.gguf")


@pytest.fixture(scope="module")
def draft_file(target_file) -> Path:
    """The same architecture with other random weights: it disagrees with the target."""
    return WRITERS[target_file.stem](target_file.with_name("draft.gguf"), seed=5)


def open_target(path: Path) -> LlamaCppRuntime:
    return LlamaCppRuntime(path, n_ctx=256, n_threads=1, options=LlamaOptions(**EXACT_LLAMA))


@pytest.fixture(scope="module")
def target(target_file):
    return open_target(target_file)


@pytest.fixture(scope="module")
def text(target) -> list[int]:
    """The prompt and 40 tokens of the target's plain greedy decoding."""
    tokens = target.tokenize(PROMPT, special=True)
    out = SpeculativeDecoder(target).generate(tokens, max_tokens=40, speculative=False)
    assert len(out.tokens) == 40
    return tokens + out.tokens


def count_replays(target, monkeypatch) -> list[int]:
    replays: list[int] = []
    real = target.replay
    monkeypatch.setattr(target, "replay", lambda n: (replays.append(n), real(n))[1])
    return replays


def logits_after(target, text: list[int], start: int, end: int) -> np.ndarray:
    return target.forward(text[start:end])


def test_a_hybrid_target_keeps_state_snapshots(target):
    assert target.recurrent
    assert target.max_rollback == K_MAX


@pytest.mark.parametrize(
    "spec, snapshots",
    [(("auto",), K_MAX), (("auto", None, 6), 6), (("ngram", 3), 3), (("none",), 1)],
)
def test_a_decoder_keeps_as_many_snapshots_as_its_longest_draft(target_file, spec, snapshots):
    """Each snapshot is a copy of the recurrent state (+345 MB for 17 on a Qwen3.5-2B-like
    target): as many as the longest draft cuts, one for --exact's padding without drafts."""
    from edgespec.backends import RuntimeOptions
    from edgespec.loader import SpecOptions, load_decoder

    opts = RuntimeOptions(n_ctx=256, n_threads=1)
    assert load_decoder(target_file, None, SpecOptions(*spec), opts).target.max_rollback == (
        snapshots
    )


@pytest.mark.parametrize("cut", [1, 5, MAX_VERIFY_WIDTH - 1])
def test_a_rollback_within_the_snapshots_needs_no_replay(target, text, cut, monkeypatch):
    """A verify pass of 17 rows, then a cut of `cut` tokens (at most all rows but the first,
    as after any verify): the next pass's logits equal a fresh cache's, and the state was not
    rebuilt."""
    replays = count_replays(target, monkeypatch)
    target.reset()
    target.forward(text[:20])
    target.forward(text[20 : 20 + MAX_VERIFY_WIDTH])
    keep = 20 + MAX_VERIFY_WIDTH - cut
    target.rollback(keep)
    got = target.forward(text[keep : keep + 4])
    assert replays == []
    target.reset()
    want = target.forward(text[: keep + 4])[keep:]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


# (passes, rollbacks): each a cut llama.cpp's snapshots do not hold; it accepts the last two
# and leaves a stale state (the snapshots are written for a pass's rows but its first)
BEYOND = {
    "beyond the snapshots": ([50], [50 - MAX_VERIFY_WIDTH - 1]),
    "twice between passes": ([50], [48, 45]),
    "a whole pass": ([30, 5], [30]),
    "across passes": ([30, 5, 1], [33]),
}


@pytest.mark.parametrize("how", BEYOND)
def test_a_rollback_past_the_snapshots_rebuilds_the_state(target, text, how, monkeypatch):
    replays = count_replays(target, monkeypatch)
    widths, cuts = BEYOND[how]
    target.reset()
    for width in widths:
        target.forward(text[target.n_past : target.n_past + width])
    for keep in cuts:
        target.rollback(keep)
    assert replays == cuts[-1:] and target.n_past == cuts[-1]
    keep = cuts[-1]
    got = target.forward(text[keep : keep + 4])
    target.reset()
    want = target.forward(text[: keep + 4])[keep:]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def test_a_cut_back_to_a_mark_rereads_only_the_tokens_after_it(target, text, monkeypatch):
    """A draft model's round: a catch-up pass, mark(), one-token passes, then a cut into them
    (past the snapshots of one-token passes): the state at the mark is put back and the
    tokens after it re-read; the next pass's logits equal a fresh cache's."""
    replays = count_replays(target, monkeypatch)
    target.reset()
    target.forward(text[:30])
    target.mark()
    for i in range(30, 36):
        target.forward(text[i : i + 1])
    target.rollback(33)
    assert replays == [] and target.n_past == 33
    got = target.forward(text[33:37])
    target.reset()
    want = target.forward(text[:37])[33:]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    target.mark()
    target.rollback(10)  # past the snapshots, before the mark: from nothing
    assert replays == [10]


@pytest.mark.parametrize("k", [1, 4, 8, 16])
@pytest.mark.parametrize("sp", [SamplingParams(0.0), SamplingParams(1.0, seed=3)],
                         ids=["greedy", "seeded"])  # fmt: skip
def test_speculative_output_equals_plain_on_a_hybrid_target(draft_file, target, k, sp, monkeypatch):
    """A hybrid draft model (its cuts go back to the marks it makes before its one-token
    passes) and prompt lookup at a fixed k: plain decoding's tokens, drafts rejected along
    the way."""
    draft = open_target(draft_file)
    tokens = target.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(target).generate(tokens, max_tokens=40, sp=sp, speculative=False)
    draft_replays = count_replays(draft, monkeypatch)
    for drafter in (ModelDrafter(draft, n_ids=target.n_vocab), NgramDrafter()):
        out = SpeculativeDecoder(target, [drafter], FixedPolicy(drafter.name, k)).generate(
            tokens, max_tokens=40, sp=sp
        )
        assert out.tokens == plain.tokens, drafter.name
        assert 0 < out.stats.n_draft_tokens
        assert out.stats.n_accepted < out.stats.n_draft_tokens  # some rejected: cut back
    assert draft_replays == []  # its cuts go back to its marks


def test_a_target_without_state_snapshots_decodes_plainly(target_file, caplog):
    """A recurrent architecture llama.cpp keeps no snapshots for (Mamba, Jamba: n_rs_seq
    clamped to 0): auto decodes plainly with a warning, a drafter named is refused. The tiny
    targets have snapshots; max_rollback is set to what such a target reports."""
    from edgespec.backends import RuntimeOptions
    from edgespec.errors import EdgespecError
    from edgespec.loader import SpecOptions, build_decoder
    from edgespec.pair import ModelPair

    runtime = open_target(target_file)
    runtime.max_rollback = 0
    pair = ModelPair(runtime, None, target_file, None, RuntimeOptions(n_ctx=256, n_threads=1))
    why = (
        f"{target_file.name} keeps a recurrent state that this llama.cpp cannot roll back (no "
        "state snapshots for its architecture), so every rejected draft would re-read the whole "
        "context"
    )
    auto = build_decoder(pair, SpecOptions())
    assert list(auto.drafters) == []
    assert f"{why}: decoding without speculation" in caplog.text
    with pytest.raises(EdgespecError) as caught:
        build_decoder(pair, SpecOptions("ngram", k=4))
    assert str(caught.value) == f"{why}; use --drafter none"
