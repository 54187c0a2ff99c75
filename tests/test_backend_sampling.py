"""A pass's rows reduced by llama.cpp's backend top-k sampler where the pass ran
(LlamaOptions.backend_sampling): each row's top 2 logits for a greedy step, its top_k + 1 for
a sampled one with top-k, not the whole row; on a GPU only those leave the device. Checked on
real llama.cpp contexts over tiny float32 GGUF models, on the CPU:
- the sampler's columns of every row of a 5-token pass are the row's largest logits, the
  same bits as the logits a context without it returns;
- greedy and seeded output with it equal output without it, plain and speculative, for
  top-k alone and with top-p or min-p, and no logits reach the host;
- where the k-th and (k+1)-th logits tie (a target whose output rows come in identical
  pairs: at odd k every row ties there, and greedy's top two always do), the pass re-runs
  for its logits and the lowest id wins, as token_dist and np.argmax keep it; at even k
  nothing re-runs; with half the tokens paired, tied rows and untied ones in one step;
- temperature alone and top-p alone take the logits as before, and a greedy pass on the
  host path reads the same logits as a context that never had the sampler;
- a llama-cpp-python without backend sampling is refused with the fix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import ModelFileError
from edgespec.sampling import SamplingParams

llama_cpp = pytest.importorskip("llama_cpp", reason="llama.cpp back-end (edgespec[llama])")

from edgespec.runtimes.llamacpp import LlamaCppRuntime, LlamaOptions, WideOdds  # noqa: E402
from edgespec.runtimes.sampling_head import largest_first, spare_columns  # noqa: E402
from tests.tiny_gguf import (  # noqa: E402
    TinyConfig,
    noisy_weights,
    random_weights,
    vocabulary,
    write_gguf,
)

PROMPT = "<|im_start|>user\nwrite the rest of it<|im_end|>\n<|im_start|>assistant\n"
ON = LlamaOptions(backend_sampling=True)
SAMPLED = [
    SamplingParams(0.8, top_k=40, top_p=0.9, seed=1),
    SamplingParams(1.0, top_k=5, seed=5),
    SamplingParams(1.5, top_k=128, min_p=0.05, seed=2),
]


def paired(folder: Path, twinned: int) -> Path:
    """A tiny target whose first `twinned` tokens' output rows come in identical pairs
    (tokens 2j and 2j + 1): their logits have twins."""
    cfg = TinyConfig()
    tensors = random_weights(cfg, len(vocabulary()[0]), seed=5)
    out = tensors["output.weight"][:twinned]
    out[1::2] = out[0::2][: len(out[1::2])]
    return write_gguf(folder / f"paired-{twinned}.gguf", cfg, tensors)


@pytest.fixture(scope="module")
def paired_target(tmp_path_factory) -> Path:
    """Every logit has a twin: sorted, a row's values tie at ranks (1, 2), (3, 4), ..."""
    return paired(tmp_path_factory.mktemp("paired"), len(vocabulary()[0]))


@pytest.fixture(scope="module")
def half_paired_target(tmp_path_factory) -> Path:
    """Half the tokens have twins: some rows tie at the cut, others do not."""
    return paired(tmp_path_factory.mktemp("half"), len(vocabulary()[0]) // 2)


def counting_reads(runtime: LlamaCppRuntime) -> list[int]:
    """Count the runtime's logits copies to the host (read_logits calls)."""
    calls = [0]
    read = runtime.read_logits

    def counted(n_rows: int) -> np.ndarray:
        calls[0] += 1
        return read(n_rows)

    runtime.read_logits = counted  # type: ignore[method-assign]
    return calls


def generate(target, draft, sp, speculative: bool, max_tokens: int = 24) -> list[int]:
    drafters = [ModelDrafter(draft)] if draft is not None else []
    policy = FixedPolicy("model", 3) if speculative else FixedPolicy(None, 0)
    dec = SpeculativeDecoder(target, drafters, policy)
    return dec.generate(PROMPT, max_tokens=max_tokens, sp=sp).tokens


def compared(
    pair: tuple[Path, Path], sp: SamplingParams, max_tokens: int = 24
) -> tuple[LlamaCppRuntime, list[int]]:
    """The pair's target with backend sampling gives the output it gives without, plain and
    speculative (the pair's draft drafting k = 3); that runtime and its logits copies."""
    host = LlamaCppRuntime(pair[0], n_ctx=256)
    device = LlamaCppRuntime(pair[0], n_ctx=256, options=ON)
    draft = LlamaCppRuntime(pair[1], n_ctx=256)
    reads = counting_reads(device)
    for speculative in (False, True):
        expected = generate(host, draft, sp, speculative, max_tokens)
        assert len(expected) == max_tokens
        assert generate(device, draft, sp, speculative, max_tokens) == expected
    return device, reads


def test_columns_are_put_largest_first_as_a_stable_argsort_would():
    """llama.cpp's top-k sampler hands its columns over unsorted; largest_first puts them
    largest first (forward_top's two, and top-k rows the candidates cannot decide), ties in
    their given order, by one sort of packed keys: the order of a stable argsort of -values,
    on 4,097-column rows full of ties, -0.0 beside 0.0, infinities and values 1e-30 apart,
    and on random ones; rows of 41 columns and a row with a NaN take the argsort itself."""
    rng = np.random.default_rng(7)
    pool = np.array([0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, 3.25, 1e-30, -1e-30], np.float32)
    rows = [rng.choice(pool, size=(4, 4097)), rng.standard_normal((5, 4097)).astype(np.float32),
            rng.standard_normal((3, 41)).astype(np.float32).round(1),
            np.array([[1.0, np.nan, 2.0, 1.0]], np.float32)]  # fmt: skip
    for values in rows:
        want = np.argsort(-values, axis=1, kind="stable")
        got = largest_first(values, np.tile(np.arange(values.shape[1]), (len(values), 1)))
        np.testing.assert_array_equal(got.ids, want)
        np.testing.assert_array_equal(got.values, np.take_along_axis(values, want, 1))


def test_the_samplers_columns_are_each_rows_largest_logits(tiny_pair):
    host = LlamaCppRuntime(tiny_pair[0], n_ctx=256)
    device = LlamaCppRuntime(tiny_pair[0], n_ctx=256, options=ON)
    tokens = host.tokenize(PROMPT, special=True)
    for k in (1, 5, 40, 128):
        for rt in (host, device):
            rt.reset()
            rt.forward(tokens[:-5], last_only=True)
        logits = host.forward(tokens[-5:])
        device.attach_top_k(k + 1)
        device.decode_rows(tokens[-5:], 5)
        found = device.read_columns(5, 5)
        assert found.values.shape == (5, k + 1)
        for row, values, ids in zip(logits, found.values, found.ids):
            top = np.sort(row)[::-1][: k + 1]
            np.testing.assert_array_equal(np.sort(values)[::-1], top)  # the same bits
            np.testing.assert_array_equal(row[ids], values)
            assert len(set(ids.tolist())) == k + 1


@pytest.mark.parametrize("sp", [SamplingParams(), *SAMPLED], ids=lambda sp: f"top_k{sp.top_k}")
def test_greedy_and_seeded_output_are_the_same_with_the_samplers_columns(tiny_pair, sp):
    device, reads = compared(tiny_pair, sp)
    # the prompt's pass copies its last row (forward, the sampler detached): nothing else
    assert reads[0] == 2
    assert device.attached == (2 if sp.greedy else sp.top_k + 1)


@pytest.mark.parametrize("top_k, reruns", [(5, True), (4, False), (0, True)])
def test_a_tie_at_the_cut_reruns_the_pass_for_its_logits(paired_target, top_k, reruns):
    """top_k 0: greedy, whose top two are twins at every row."""
    host = LlamaCppRuntime(paired_target, n_ctx=256)
    device = LlamaCppRuntime(paired_target, n_ctx=256, options=ON)
    sp = SamplingParams(1.0, top_k=top_k, seed=4) if top_k else SamplingParams()
    reads = counting_reads(device)
    expected = generate(host, None, sp, speculative=False, max_tokens=16)
    assert len(expected) == 16
    assert generate(device, None, sp, speculative=False, max_tokens=16) == expected
    # odd k: the k-th value's twin is the spare at every row, so each step's pass re-runs
    assert reads[0] == (1 + 16 if reruns else 1)


@pytest.mark.parametrize("top_k", [3, 5, 0])
def test_rows_that_tie_at_the_cut_beside_rows_that_do_not(half_paired_target, tiny_pair, top_k):
    sp = SamplingParams(1.0, top_k=top_k, seed=4) if top_k else SamplingParams()
    device, reads = compared((half_paired_target, tiny_pair[1]), sp, max_tokens=16)
    passes = device.passes - 2  # the two prompts' passes
    assert 2 < reads[0] < 2 + passes  # some steps re-ran for a tied row, not all


@pytest.fixture(scope="module")
def wide_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny target and draft with 10,000 token ids (padded past the real ones): wide
    enough for a row to be cut to its 4,097 largest logits (spare_columns)."""
    folder, cfg = tmp_path_factory.mktemp("wide"), TinyConfig()
    target = random_weights(cfg, 10_000, seed=6)
    draft = noisy_weights(target, 7, 0.3)
    return (
        write_gguf(folder / "wide-target.gguf", cfg, target, pad_to=10_000),
        write_gguf(folder / "wide-draft.gguf", cfg, draft, pad_to=10_000),
    )


WIDE = [
    SamplingParams(1.0, seed=1),  # the spare decides every row
    SamplingParams(3.0, seed=2),  # flat rows: passes re-run, then the logits are read
    SamplingParams(1.0, min_p=0.05, seed=3),
    SamplingParams(1.0, top_k=500, top_p=0.9, seed=4),
    SamplingParams(1.0, top_p=0.9, seed=5),
    SamplingParams(1.0, top_p=0.5, min_p=0.02, seed=6),
]


@pytest.mark.parametrize(
    "sp", WIDE, ids=lambda sp: f"T{sp.temperature}-k{sp.top_k}-p{sp.top_p}-minp{sp.min_p}"
)
def test_rows_cut_to_their_4097_largest_logits(wide_pair, sp):
    """Temperature alone, min-p and a top-k over 128: each row's 4,097 largest logits cross,
    and seeded output, plain and speculative, is the output without backend sampling. At T
    3.0 the spare lies too near the peak: passes re-run for their logits, and after a few
    such the runtime reads the logits (WideOdds)."""
    device, reads = compared(wide_pair, sp)
    if sp.temperature < 3.0:
        assert reads[0] == 2 and device.attached == 4_097  # the prompts' last rows alone
    else:
        assert reads[0] > 2 and device.wide_odds.backoff > device.wide_odds.BACKOFF


def test_the_columns_a_sampled_row_is_cut_to():
    """spare_columns: top_k + 1 up to 128; 4,097 for temperature alone and top-p without
    min-p (Gumbel only: the rejection sampler's p is the whole row, or a nucleus whose edge
    the spare may leave open), min-p and a top-k up to 4,096; none for greedy, a larger
    top-k, or a vocabulary under twice the columns."""
    cases = {
        SamplingParams(): 0,
        SamplingParams(0.8, top_k=40, top_p=0.9): 41,
        SamplingParams(0.8, top_k=128): 129,
        SamplingParams(0.8, top_k=129): 4_097,
        SamplingParams(0.8, top_k=4_096, top_p=0.9): 4_097,
        SamplingParams(0.8, top_k=4_097): 0,
        SamplingParams(0.8): 4_097,
        SamplingParams(0.8, sampler="rejection"): 0,
        SamplingParams(0.8, min_p=0.05, sampler="rejection"): 4_097,
        SamplingParams(0.8, top_p=0.9): 4_097,
        SamplingParams(0.8, top_p=0.9, sampler="rejection"): 0,
        SamplingParams(0.8, top_p=0.9, min_p=0.05): 4_097,
        SamplingParams(0.8, top_p=0.9, min_p=0.05, sampler="rejection"): 4_097,
    }
    assert {sp: spare_columns(sp, 151_936) for sp in cases} == cases
    assert spare_columns(SamplingParams(0.8), 8_192) == 0
    assert spare_columns(SamplingParams(0.8, top_k=40), 8_192) == 41


def test_wide_passes_back_off_while_they_re_run_often():
    """WideOdds: wide passes go on while under a fifth re-run (a moving average over ~8);
    two re-runs in a row back off 16 passes, then one more 32; rare re-runs never do."""
    odds, seen = WideOdds(), []

    def passes(n: int, reran: bool) -> None:
        for _ in range(n):
            wide = odds.wide_now()
            seen.append(wide)
            odds.reran = wide and reran

    passes(2, reran=True)  # the first re-run: 0.125; the second: 0.234, judged at the next
    passes(17, reran=False)
    assert seen == [True, True] + [False] * 16 + [True]
    seen.clear()
    passes(1, reran=True)  # 0.1 after the back-off: one re-run is enough now, twice as long
    passes(35, reran=False)
    assert seen == [True] + [False] * 32 + [True] * 3
    seen.clear()
    odds = WideOdds()
    for i in range(200):  # one pass in 20 re-runs
        passes(1, reran=i % 20 == 0)
    assert all(seen)


def test_other_parameters_take_the_logits_as_does_a_forward_after_a_sampled_pass(tiny_pair):
    host = LlamaCppRuntime(tiny_pair[0], n_ctx=256)
    device = LlamaCppRuntime(tiny_pair[0], n_ctx=256, options=ON)
    for sp in (SamplingParams(0.9, seed=5), SamplingParams(0.9, top_p=0.8, seed=5)):
        assert generate(device, None, sp, False) == generate(host, None, sp, False)
        assert device.attached == 0
    generate(device, None, SAMPLED[0], False)
    assert device.attached == SAMPLED[0].top_k + 1
    tokens = host.tokenize(PROMPT, special=True)
    for rt in (host, device):
        rt.reset()
    np.testing.assert_array_equal(device.forward(tokens), host.forward(tokens))


def test_a_llama_cpp_python_without_backend_sampling_is_refused(tiny_pair, monkeypatch):
    monkeypatch.delattr(llama_cpp, "llama_set_sampler")
    with pytest.raises(ModelFileError) as e:
        LlamaCppRuntime(tiny_pair[0], n_ctx=256, options=ON)
    assert str(e.value) == (
        "tiny-target.gguf: backend sampling needs llama.cpp's llama_set_sampler, which this "
        "llama-cpp-python lacks; upgrade it to 0.3.36 or later, or drop --backend-sampling"
    )
