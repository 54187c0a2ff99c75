"""The engine over real llama.cpp contexts, on tiny float32 GGUF models built in the test.

On float32 models llama.cpp's batched and single-token logits agree to rounding, so greedy
speculative output must equal plain output token for token.
"""

import contextlib
import logging
from dataclasses import replace

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import Draft, ModelDrafter, NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import ModelFileError, VocabularyMismatchError
from edgespec.loader import SpecOptions, load_decoder
from edgespec.runtime import forward_dists, forward_top, top_of
from edgespec.sampling import SamplingParams, row_dists
from tests.fakes import logits_to_probs
from tests.stats import assert_law

PROMPT = "<|im_start|>user\ndef the rest(a, b):\n    return a<|im_end|>\n<|im_start|>assistant\n"


class OracleDrafter:
    """Proposes the reference continuation, wrong exactly at draft position wrong_at."""

    name = "oracle"

    def __init__(self, prompt_len, reference, wrong_at, n_vocab):
        self.prompt_len, self.reference = prompt_len, reference
        self.wrong_at, self.n_vocab = wrong_at, n_vocab

    def propose(self, context, k, sp):
        done = len(context) - self.prompt_len
        tokens = list(self.reference[done : done + k])
        if self.wrong_at is not None and self.wrong_at < len(tokens):
            tokens[self.wrong_at] = (tokens[self.wrong_at] + 1) % self.n_vocab
        return Draft(np.asarray(tokens, dtype=np.int32), None)

    def sync(self, context):
        pass

    def reset(self, rng):
        pass


@pytest.fixture(scope="module")
def reference(tiny_runtimes):
    target, _ = tiny_runtimes
    tokens = target.tokenize(PROMPT, special=True)
    ref = SpeculativeDecoder(target).generate(tokens, max_tokens=48, speculative=False)
    assert len(ref.tokens) >= 16, "the tiny model should not stop at once"
    return tokens, ref


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_scripted_drafter_wrong_at_every_position(tiny_runtimes, reference, k):
    target, _ = tiny_runtimes
    tokens, ref = reference
    for wrong_at in [None, *range(k)]:
        drafter = OracleDrafter(len(tokens), ref.tokens, wrong_at, target.n_vocab)
        out = SpeculativeDecoder(target, [drafter], FixedPolicy("oracle", k)).generate(
            tokens, max_tokens=48
        )
        assert out.tokens == ref.tokens, (k, wrong_at)
        if wrong_at is not None:
            assert out.stats.acceptance_by_pos[wrong_at] == 0.0
        else:
            assert out.stats.acceptance_rate == 1.0


@pytest.mark.parametrize("k", [1, 2, 4, 8])
@pytest.mark.parametrize("kind", ["model", "ngram"])
def test_greedy_speculative_equals_plain(tiny_runtimes, reference, kind, k):
    target, draft = tiny_runtimes
    tokens, ref = reference
    drafter = ModelDrafter(draft) if kind == "model" else NgramDrafter()
    out = SpeculativeDecoder(target, [drafter], FixedPolicy(kind, k)).generate(
        tokens, max_tokens=48
    )
    assert out.tokens == ref.tokens
    assert out.stats.n_draft_tokens > 0
    if kind == "model":
        assert 0.0 < out.stats.acceptance_rate < 1.0  # the noisy draft agrees, not always


def test_rollback_gives_the_logits_of_a_fresh_context(tiny_runtimes, reference):
    target, _ = tiny_runtimes
    tokens, ref = reference
    target.reset()
    target.forward(tokens)
    target.forward([5, 6, 7, 8])
    target.rollback(len(tokens) + 1)  # keep one draft token, drop three rejected
    after = target.forward([9])[0]
    target.reset()
    target.forward([*tokens, 5])
    fresh = target.forward([9])[0]
    target.reset()
    np.testing.assert_allclose(after, fresh, atol=1e-4)


def copied_then_rolled_back(target, tokens):
    """(width, last_only, the logits forward copies for the last width tokens) at widths 1,
    2, 5 and 9, each time with the cache rolled back so that the pass can be taken again."""
    for width in (1, 2, 5, 9):
        for last_only in (False, True):
            target.reset()
            target.forward(tokens[:-width], last_only=True)
            logits = target.forward(tokens[-width:], last_only=last_only)
            target.rollback(len(tokens) - width)
            yield width, last_only, logits


@contextlib.contextmanager
def counting_copies(target):
    """The list each copy of a pass's logits (read_logits) appends its row count to."""
    copies: list[int] = []
    read = target.read_logits
    target.read_logits = lambda n: copies.append(n) or read(n)
    try:
        yield copies
    finally:
        del target.read_logits
        target.reset()


def test_top_rows_are_read_in_llamas_buffer_as_from_a_copy_of_it(tiny_runtimes, reference):
    """forward_top (greedy verify, a draft's token and confidence) reads each row's argmax and
    probability where llama.cpp left the logits: the ids and the bits top_of gives on
    forward's copy, at every width, without a copy."""
    target, _ = tiny_runtimes
    tokens, _ = reference
    assert target.top_outputs
    with counting_copies(target) as copies:
        for width, last_only, logits in copied_then_rolled_back(target, tokens):
            want = top_of(logits)
            for with_prob in (False, True):
                before = len(copies)
                got = forward_top(target, tokens[-width:], last_only=last_only, with_prob=with_prob)
                target.rollback(len(tokens) - width)
                assert len(copies) == before  # no row copied
                assert got.ids.tolist() == want.ids.tolist()
                assert len(got.ids) == (1 if last_only else width)
                if with_prob:
                    assert got.prob is not None and want.prob is not None
                    np.testing.assert_array_equal(got.prob, want.prob)
                else:
                    assert got.prob is None


SAMPLED = [
    SamplingParams(1.0, seed=3),
    SamplingParams(0.8, top_k=3, seed=3),
    SamplingParams(1.2, top_p=0.9, seed=3),
    SamplingParams(0.9, min_p=0.1, seed=3),
]


@pytest.mark.parametrize("sp", SAMPLED, ids=["T", "top-k", "top-p", "min-p"])
def test_sampled_rows_are_read_in_llamas_buffer_as_from_a_copy_of_it(tiny_runtimes, reference, sp):
    """forward_dists without backend sampling reads each row where llama.cpp left the logits
    (row_dists, valid until the next pass): at every width, each row's support and
    probabilities are the bits token_dist gives on forward's copy, and so is every row's
    Gumbel-max token, without a copy of the pass (only a row kept whole, temperature
    alone's, is copied, one by one)."""
    target, _ = tiny_runtimes
    tokens, _ = reference
    with counting_copies(target) as copies:
        for width, last_only, logits in copied_then_rolled_back(target, tokens):
            want = row_dists(logits, sp)
            before = len(copies)
            got = forward_dists(target, tokens[-width:], sp, last_only=last_only)
            assert len(copies) == before  # no pass copied
            races = [x.gumbel_maxes(7, 30) for x in (got, want)]  # type: ignore[attr-defined]
            assert races[0] is None and races[1] is None or races[0].tolist() == races[1].tolist()
            for i in range(1 if last_only else width):
                mine, theirs = got(i), want(i)
                assert mine.token_ids().tolist() == theirs.token_ids().tolist()
                assert mine.probs.tobytes() == theirs.probs.tobytes()


def test_a_row_read_in_llamas_buffer_is_refused_after_the_next_pass(tiny_runtimes, reference):
    """Rows read in the buffer are valid until the next pass: a row asked for after it is an
    error, not the next pass's logits; a row taken before it keeps its own (temperature
    alone's is copied: a draft's q outlives the pass)."""
    target, _ = tiny_runtimes
    tokens, _ = reference
    sp = SamplingParams(1.0, seed=3)
    target.reset()
    target.forward(tokens[:-3], last_only=True)
    want = row_dists(target.forward(tokens[-3:]), sp)(0).probs
    target.rollback(len(tokens) - 3)
    rows = forward_dists(target, tokens[-3:], sp)
    kept = rows(0)
    target.forward([5])  # its row where row 0 was
    with pytest.raises(RuntimeError) as caught:
        rows(1)
    assert str(caught.value) == "a step's rows were read after the runtime's next pass"
    with pytest.raises(RuntimeError):
        rows.gumbel_maxes(7, 30)  # type: ignore[attr-defined]
    assert kept.probs.tobytes() == want.tobytes()
    target.reset()


@pytest.mark.parametrize("sampler", ["gumbel", "rejection"])
def test_sampling_on_llamacpp_matches_the_target_distribution(tiny_runtimes, sampler):
    """The first three tokens' joint law under speculative sampling with the model drafter at
    k = 3 (every one of them from a draft position when accepted) equals the target's exact
    one. Bound: tests.stats.assert_law (chi-square, false failure 1e-6), N = 500."""
    target, draft = tiny_runtimes
    sp = SamplingParams(temperature=1.5, top_k=3, sampler=sampler)
    assert_first_tokens_follow_the_target(target, ModelDrafter(draft), sp)


def assert_first_tokens_follow_the_target(target, drafter, sp: SamplingParams) -> dict:
    """Speculative sampling after "the cat" with `drafter` at k = 3, 500 seeds: the first
    three tokens' joint law equals the target's exact one (tests.stats.assert_law); returns
    that exact law, {tokens: probability}."""
    prompt = target.tokenize("the cat", special=False)
    law: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(3):
        longer = {}
        for prefix, mass in law.items():
            target.reset()
            p = logits_to_probs(target.forward([*prompt, *prefix])[-1], sp)
            for t in np.flatnonzero(p):
                longer[(*prefix, int(t))] = mass * float(p[t])
        law = longer
    target.reset()
    dec = SpeculativeDecoder(target, [drafter], FixedPolicy("model", 3))
    counts: dict[tuple[int, ...], int] = {}
    for seed in range(500):
        out = dec.generate(prompt, max_tokens=4, sp=replace(sp, seed=seed))
        assert out.stats.drafted_by_pos[2] >= 1  # the first step drafted 3
        key = tuple(out.tokens[:3])
        counts[key] = counts.get(key, 0) + 1
    assert set(counts) <= set(law)
    cells = sorted(law)
    assert_law(np.array([counts.get(c, 0) for c in cells]), np.array([law[c] for c in cells]))
    return law


SEEDED = [SamplingParams(1.0, seed=1), SamplingParams(0.7, top_p=0.9, seed=2)]


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("kind", ["model", "ngram"])
def test_seeded_speculative_equals_seeded_plain(tiny_runtimes, reference, kind, k):
    """Seeded sampling through real llama.cpp contexts: token for token the output of plain
    decoding with the same seed (Gumbel-max keyed to positions; float32 logits are the same
    at every pass width on this model)."""
    target, draft = tiny_runtimes
    tokens, _ = reference
    for sp in SEEDED:
        ref = SpeculativeDecoder(target).generate(tokens, max_tokens=40, sp=sp, speculative=False)
        drafter = ModelDrafter(draft) if kind == "model" else NgramDrafter()
        out = SpeculativeDecoder(target, [drafter], FixedPolicy(kind, k)).generate(
            tokens, max_tokens=40, sp=sp
        )
        assert out.tokens == ref.tokens, sp
        assert out.stats.n_draft_tokens > 0


def test_a_seeded_request_repeats_in_auto_mode_on_llamacpp(tiny_runtimes, reference):
    """Ten seeded requests with k and the drafter chosen per step by the adaptive policy
    (from measured time, so the steps differ run to run): one output, plain decoding's."""
    from edgespec.controller import AdaptivePolicy, CostCurve

    target, draft = tiny_runtimes
    tokens, _ = reference
    sp = SamplingParams(0.8, top_p=0.9, seed=21)
    ref = SpeculativeDecoder(target).generate(tokens, max_tokens=40, sp=sp, speculative=False)
    curve = CostCurve([1.0 + 0.05 * n for n in range(9)], draft_s=0.01)
    outputs = set()
    for _ in range(10):
        drafters = [ModelDrafter(draft), NgramDrafter()]
        dec = SpeculativeDecoder(target, drafters, AdaptivePolicy(curve, k_max=8))
        out = dec.generate(tokens, max_tokens=40, sp=sp)
        assert out.stats.n_draft_tokens > 0
        outputs.add(tuple(out.tokens))
    assert outputs == {tuple(ref.tokens)}


def test_draft_with_another_vocabulary_is_refused(tmp_path, tiny_pair, monkeypatch):
    from tests import tiny_gguf

    monkeypatch.setattr(tiny_gguf, "MERGES", [*tiny_gguf.MERGES[:-1], "Ġ b"])
    other = tiny_gguf.write_gguf(
        tmp_path / "other.gguf",
        tiny_gguf.TinyConfig(),
        tiny_gguf.random_weights(tiny_gguf.TinyConfig(), 279, 5),
    )
    with pytest.raises(VocabularyMismatchError) as e:
        load_decoder(tiny_pair[0], other, SpecOptions(drafter="model", k=4))
    assert str(e.value).startswith(
        f"draft {other} cannot draft for target {tiny_pair[0]}: token text differs (target "
    )
    assert str(e.value).endswith(
        "use a draft model from the target's family with the same tokenizer, or --drafter ngram"
    )


def test_truncated_and_corrupt_gguf_are_refused(tmp_path, tiny_pair):
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    data = tiny_pair[0].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError) as e:
        LlamaCppRuntime(cut)
    assert str(e.value).startswith(f"cannot load {cut}: ")
    assert "the file may be truncated or corrupt" in str(e.value)
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(data[:8] + b"\xff" * 64 + data[72:])
    with pytest.raises(ModelFileError, match="the file may be truncated or corrupt"):
        LlamaCppRuntime(corrupt)


def test_a_cuda_build_with_graphs_keeps_one_graph_unless_they_are_turned_off():
    """ggml-cuda lists USE_GRAPHS among its features where it was built with CUDA graphs;
    GGML_CUDA_DISABLE_GRAPHS turns them off at run time. Feature strings as
    llama_print_system_info writes them."""
    from edgespec.runtimes.llama_library import one_graph_build

    cuda = b"CUDA : ARCHS = 900 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | CPU : AVX2 = 1 | "
    assert one_graph_build(cuda, {})
    assert not one_graph_build(cuda, {"GGML_CUDA_DISABLE_GRAPHS": "1"})
    assert not one_graph_build(b"CPU : SSE3 = 1 | AVX2 = 1 | FMA = 1 | ", {})


def test_a_cpu_runtime_keeps_no_graph(tiny_runtimes):
    assert [rt.keeps_one_graph for rt in tiny_runtimes] == [False, False]


def test_layers_asked_for_on_a_gpu_this_build_cannot_offload_to_are_said_to_run_on_the_cpu(
    tiny_pair, caplog
):
    """llama.cpp, asked for GPU layers by a build without a GPU back-end, runs them on the CPU
    without a word; the runtime says so once, and runs them there as asked."""
    import llama_cpp

    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    target, _ = tiny_pair
    with caplog.at_level(logging.WARNING, logger="edgespec.runtimes.llamacpp"):
        on_gpu = LlamaCppRuntime(target, n_ctx=64, n_gpu_layers=-1)
        LlamaCppRuntime(target, n_ctx=64, n_gpu_layers=0)
    said = [r.getMessage() for r in caplog.records if "GPU back-end" in r.getMessage()]
    if llama_cpp.llama_supports_gpu_offload():
        assert said == [] and on_gpu.keeps_one_graph in (True, False)
    else:
        assert said == [
            f"{target.name}: layers were asked for on the GPU, but this llama-cpp-python build "
            "has no GPU back-end, so everything runs on the CPU; `edgespec doctor` says how to "
            "build it with CUDA"
        ]
        assert on_gpu.keeps_one_graph is False
    assert on_gpu.forward([5, 9, 14]).shape == (3, on_gpu.n_vocab)
