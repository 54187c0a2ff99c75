"""Sampled steps read each row's likeliest columns from a sampling head (runtimes/sampling_head.py).

On a GPU the head runs on a pass's logits in device memory, and only [rows, 129] values and
ids and [rows] log-sum-exps reach the host instead of [rows, V] logits. Checked on the CPU EP:
- the head's outputs are the row's largest logits in order, their columns, and
  log-sum-exp(row / T) within 1e-5 relative of a float64 reference, finite where exp(z)
  overflows float32;
- its max(row / T) is TopK's first value over T, not a ReduceMax over the row (which ONNX
  Runtime's CUDA EP reduces slowly at widths >= 2): the same outputs as the head that took
  the ReduceMax, at every width 1..17 (values and ids exactly, lse within 1e-6 relative);
- with top-k on, candidate_dist is token_dist bit for bit; with top-p or min-p alone, the same
  support and probabilities within 1e-5 relative; None exactly where the candidates cannot
  decide (temperature alone, top-k above them, top-p's mass not reached inside them, a tie
  across their boundary);
- through the loop, the joint law of the first three tokens at k = 3, rejection and Gumbel
  (tests/stats.assert_law: chi-square, false failure 1e-6, N = 5,000), with 2 candidates of
  5 tokens so that rows take both ways;
- on a tiny ONNX pair, seeded output with the head equals seeded output without it, plain
  and speculative, and the target's logits reach the host only for rows the candidates
  cannot decide.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter, NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.sampling import PassRows, SamplingParams, candidate_dist, token_dist
from tests.fakes import FakeRuntime
from tests.stats import assert_law
from tests.test_engine import JOINT_PROMPT, exact_joint, joint_counts

ort = pytest.importorskip("onnxruntime", reason="the sampling head runs on onnxruntime")
pytest.importorskip("onnx", reason="the sampling head is built with onnx (edgespec[onnx])")

from edgespec.runtimes.sampling_head import (  # noqa: E402
    CANDIDATES,
    SamplingHead,
    head_dists,
    head_model,
)

V = 32_768  # wide enough for token_dist's column grid (upper_set) at top-k 128
CPU = ["CPUExecutionProvider"]


def head_of(logits: np.ndarray, temperature: float, head: SamplingHead | None = None):
    head = head or SamplingHead(ort, logits.shape[-1], CPU)
    return head.run(ort.OrtValue.ortvalue_from_numpy(logits[None]), temperature)


def peaked_rows(n: int, seed: int = 0) -> np.ndarray:
    """Rows like a language model's: a noisy floor and a few tokens far above it."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((n, V)).astype(np.float32) * 1.5
    for row in rows:
        row[rng.choice(V, 12, replace=False)] += rng.uniform(6, 12, 12).astype(np.float32)
    return rows


def tie_at_rank(row: np.ndarray, rank: int) -> np.ndarray:
    """row with the tokens at rank and rank + 1 (by value) made equal, the later id first."""
    order = np.argsort(-row, kind="stable")
    row = row.copy()
    row[order[rank + 1]] = row[order[rank]]
    return row


def test_the_head_returns_the_largest_logits_their_columns_and_log_sum_exp():
    rows = peaked_rows(3)
    rows[2] *= 30.0  # at T = 0.05, z reaches ~7,000: exp(z) alone overflows float32
    head = SamplingHead(ort, V, CPU)
    value = ort.OrtValue.ortvalue_from_numpy(rows[None])
    for temperature in (1.0, 0.7, 0.05):  # one buffer, bound once: each run's temperature
        found = head.run(value, temperature)
        assert found.values.shape == found.ids.shape == (3, CANDIDATES + 1)
        want = -np.sort(-rows, axis=-1)[:, : CANDIDATES + 1]
        assert np.array_equal(found.values, want)
        assert np.array_equal(np.take_along_axis(rows, found.ids, -1), found.values)
        z = rows.astype(np.float64) / temperature
        peak = z.max(-1)
        lse = peak + np.log(np.exp(z - peak[:, None]).sum(-1))
        np.testing.assert_allclose(found.lse, lse, rtol=1e-5)
    assert len(head.bindings) == 1


def reduce_max_head(n_columns: int) -> bytes:
    """The head before issue 44: z_max a ReduceMax over each row of z = logits / T."""
    import onnx
    from onnx import helper

    model = onnx.load_from_string(head_model(n_columns))
    nodes = [n for n in model.graph.node if n.output[0] not in ("largest", "z_max")]
    at = next(i for i, n in enumerate(nodes) if n.output[0] == "z") + 1
    nodes.insert(at, helper.make_node("ReduceMax", ["z"], ["z_max"], axes=[-1], keepdims=1))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model.SerializeToString()


def test_the_heads_max_is_topks_first_value_as_the_reduce_max_was_at_every_width():
    import onnx

    n_columns = 1000  # not a multiple of 128
    ops = {n.op_type for n in onnx.load_from_string(head_model(n_columns)).graph.node}
    assert not ops & {"ReduceMax", "ArgMax"}, ops
    new, old = (
        ort.InferenceSession(model, providers=CPU)
        for model in (head_model(n_columns), reduce_max_head(n_columns))
    )
    rng = np.random.default_rng(5)
    for width in range(1, 18):
        rows = rng.standard_normal((1, width, n_columns)).astype(np.float32) * 3.0
        rows[0, -1] *= 30.0  # exp(z) overflows float32 at T = 0.05
        for temperature in (1.0, 0.7, 0.05):
            feed = {"logits": rows, "inv_temperature": 1.0 / np.float32([temperature])}
            got, want = new.run(None, feed), old.run(None, feed)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
            assert np.isfinite(got[2]).all()
            np.testing.assert_allclose(got[2], want[2], rtol=1e-6, err_msg=f"width {width}")


def both_ways(rows: np.ndarray, sp: SamplingParams):
    """(candidate_dist, token_dist) of each row, the first asserted decided, on the same ids."""
    found = head_of(rows, sp.temperature)
    for i, row in enumerate(rows):
        got = candidate_dist(found.values[i], found.ids[i], float(found.lse[i]), V, sp)
        want = token_dist(row, sp)
        assert got is not None
        assert np.array_equal(got.ids, want.ids)
        yield got, want


TOP_K_CASES = [  # every filter after top-k, and top-k at the candidates' limit
    SamplingParams(0.7, top_k=40),
    SamplingParams(1.3, top_k=1),
    SamplingParams(0.8, top_k=40, top_p=0.9),
    SamplingParams(1.0, top_k=20, min_p=0.05),
    SamplingParams(0.5, top_k=CANDIDATES, top_p=0.5, min_p=0.01),
]


@pytest.mark.parametrize("sp", TOP_K_CASES, ids=str)
def test_with_top_k_the_candidates_give_token_dist_bit_for_bit(sp):
    rows = peaked_rows(4, seed=1)
    rows[3] = tie_at_rank(rows[3], 10)  # ties inside top-k: the lowest id first, as token_dist
    rows[2] = tie_at_rank(rows[2], min(sp.top_k, CANDIDATES - 1) - 1)  # ... and at its boundary
    for got, want in both_ways(rows, sp):
        assert np.array_equal(got.probs, want.probs)


NO_TOP_K_CASES = [
    SamplingParams(0.7, top_p=0.9),
    SamplingParams(1.0, top_p=0.5),
    SamplingParams(0.8, min_p=0.05),
    SamplingParams(0.8, top_p=0.95, min_p=0.02),
]


@pytest.mark.parametrize("sp", NO_TOP_K_CASES, ids=str)
def test_without_top_k_the_candidates_give_token_dist_within_rounding(sp):
    rows = peaked_rows(4, seed=2)
    for got, want in both_ways(rows, sp):
        np.testing.assert_allclose(got.probs, want.probs, rtol=1e-5)


def test_the_candidates_decide_nothing_they_cannot():
    row = peaked_rows(1, seed=3)[0]
    flat = np.random.default_rng(4).standard_normal(V).astype(np.float32)
    tied = tie_at_rank(row, CANDIDATES - 1)  # the last candidate ties the spare

    def decided(r: np.ndarray, sp: SamplingParams) -> bool:
        found = head_of(r[None], sp.temperature)
        lse = float(found.lse[0])
        return candidate_dist(found.values[0], found.ids[0], lse, V, sp) is not None

    assert not decided(row, SamplingParams(0.7))  # temperature alone: any token can be drawn
    assert not decided(row, SamplingParams(0.7, top_k=CANDIDATES + 1))
    assert decided(row, SamplingParams(0.7, top_k=CANDIDATES))
    assert not decided(flat, SamplingParams(1.0, top_p=0.9))  # the mass is not reached
    assert not decided(flat, SamplingParams(1.0, min_p=1e-4))  # the cut falls past them
    assert decided(row, SamplingParams(0.7, top_p=0.9))
    assert not decided(tied, SamplingParams(0.7, top_k=5))
    assert decided(tie_at_rank(row, CANDIDATES - 2), SamplingParams(0.7, top_k=5))
    # a top-k of the whole row or more is off, as in token_dist
    assert not decided(row, SamplingParams(0.7, top_k=V))


class HeadRuntime(FakeRuntime):
    """A FakeRuntime whose sampled rows go through a real sampling head of `candidates`."""

    def __init__(self, candidates: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sampling_head = SamplingHead(ort, self.n_vocab, CPU, candidates)
        self.ways = {"rows": 0, "logits": 0}  # rows read, and those read from their logits

    @property
    def dists_on_device(self) -> bool:
        return True

    def forward_dists(self, tokens, sp, *, last_only=False):
        logits = self.forward(tokens, last_only=last_only)
        found = head_of(logits, sp.temperature, self.sampling_head)
        dist = head_dists(found, lambda i: self.read(logits, i), self.n_vocab, sp)
        return PassRows(dist.n, lambda i: self.count(dist, i))

    def read(self, logits: np.ndarray, i: int) -> np.ndarray:
        self.ways["logits"] += 1
        return logits[i]

    def count(self, dist, i):
        self.ways["rows"] += 1
        return dist(i)


JOINT_CASES = [
    ("rejection", SamplingParams(0.7, top_k=2)),
    ("rejection", SamplingParams(1.3, top_p=0.8)),
    ("gumbel", SamplingParams(1.3, top_p=0.8)),
    ("gumbel", SamplingParams(1.0, min_p=0.3)),
]


@pytest.mark.parametrize("sampler, sp", JOINT_CASES, ids=[f"{a}-{b}" for a, b in JOINT_CASES])
def test_through_the_head_the_first_three_tokens_follow_the_target_joint_law(sampler, sp):
    """k = 3 with target and draft each behind a head of 2 candidates over 5 tokens: each
    row is decided by its candidates or, where they cannot, by its logits, and the first
    three tokens, each from a draft position whenever accepted, keep the target's law."""
    n_vocab, n = 5, 5000
    rt = HeadRuntime(2, n_vocab=n_vocab, n_ctx=64, seed=7, scale=1.5)
    rt.eog = 999
    draft_rt = HeadRuntime(2, n_vocab=n_vocab, n_ctx=64, seed=8, scale=1.5)
    dec = SpeculativeDecoder(rt, [ModelDrafter(draft_rt)], FixedPolicy("model", 3))
    counts, drafted = joint_counts(dec, replace(sp, sampler=sampler), n, n_vocab)
    assert drafted[2] >= n
    for runtime in (rt, draft_rt):  # rows decided by their candidates, and (no top-k) not
        assert (0 < runtime.ways["logits"] or sp.top_k) and runtime.ways["logits"] < (
            runtime.ways["rows"]
        ), runtime.ways
    assert_law(counts, exact_joint(rt, JOINT_PROMPT, replace(sp, seed=0)))


# --- a real ONNX Runtime pair -----------------------------------------------------------------

from edgespec.export.onnx_export import export_onnx  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxOptions, OnnxRuntime  # noqa: E402
from tests.test_onnx import PROMPT  # noqa: E402
from tests.test_top_outputs import count_logit_reads  # noqa: E402
from tests.tiny_hf import make_tiny_hf, noisy_copy  # noqa: E402


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("head")
    hf = make_tiny_hf(root / "hf", arch="qwen2", seed=3)
    draft_hf = noisy_copy(hf, root / "draft_hf")
    return {
        "target": export_onnx(hf, root / "target"),
        "draft": export_onnx(draft_hf, root / "draft"),
    }


SEEDED = [
    SamplingParams(0.8, top_k=40, top_p=0.9),
    SamplingParams(1.0, top_p=0.9),
    SamplingParams(0.7, min_p=0.1),
    SamplingParams(0.8),  # every row by its logits
]


@pytest.mark.parametrize("sp", SEEDED, ids=str)
def test_seeded_output_is_the_same_with_the_head_plain_and_speculative(folders, sp):
    outs, reads = {}, {}
    for head in (False, True):
        options = OnnxOptions(sampling_head=head)
        target = OnnxRuntime(folders["target"], n_ctx=256, options=options)
        draft = OnnxRuntime(folders["draft"], n_ctx=256, options=options)
        assert (target.sampling_head is not None) == head
        tokens = target.tokenize(PROMPT, special=True)
        for k in (0, 4):
            drafters = [ModelDrafter(draft), NgramDrafter()] if k else []
            decoder = SpeculativeDecoder(target, drafters, FixedPolicy("model" if k else None, k))
            logit_reads = count_logit_reads(target)
            for seed in range(3):
                out = decoder.generate(tokens, max_tokens=40, sp=replace(sp, seed=seed))
                outs[head, k, seed] = out.tokens
            reads[head, k] = len(logit_reads)
    for key, tokens in outs.items():
        assert tokens == outs[False, 0, key[2]], key
    steps = reads[False, 4]  # without the head: the prompt's pass and every step
    if sp.top_k or sp.top_p < 1.0 or sp.min_p > 0.0:
        assert reads[True, 4] < steps / 2, reads  # the prompt's passes, and rows undecided
    else:
        assert reads[True, 4] == steps, reads


def test_a_runtime_has_no_head_unless_asked(folders):
    """On CUDA too: on an H200 the head made sampled verify passes dearer (docs/benchmarks.md)."""
    assert OnnxRuntime(folders["target"], n_ctx=64).sampling_head is None


def test_doctor_says_what_a_sampled_step_copies(folders):
    from edgespec.app.doctor import sampled_rows_status

    head = OnnxRuntime(folders["target"], n_ctx=64, options=OnnxOptions(sampling_head=True))
    assert sampled_rows_status(head) == (
        "sampled steps read each row's 128 likeliest logits from a sampling head (every logit "
        "where temperature alone, or a top-p wider than those, needs them)"
    )
    plain = OnnxRuntime(folders["target"], n_ctx=64)
    assert sampled_rows_status(plain) == "sampled steps copy every row's logits to the host"


@pytest.mark.gpu
def test_on_cuda_the_head_decides_sampled_rows_as_the_host_does(folders, tmp_path):
    """On the CUDA EP (CUDA graphs on), an fp16-compute export: the head's candidates are the
    largest of the same pass's logits, and seeded output with the head equals seeded output
    without it, in plain decoding and at k = 4 (top-k: the same distributions, bit for bit)."""
    from tests.test_onnx import TOKENS, cuda_available

    reason = cuda_available()
    if reason:
        pytest.skip(f"the sampling head on CUDA not tested: {reason}")
    hf = make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3)
    folder = export_onnx(hf, tmp_path / "fp16", quant="fp16", compute="fp16")
    cuda, options = ["CUDAExecutionProvider"], OnnxOptions(sampling_head=True)
    gpu = OnnxRuntime(folder, n_ctx=256, providers=cuda, options=options)
    assert gpu.on_cuda and gpu.cuda_graph and gpu.sampling_head is not None
    sp = SamplingParams(0.8, top_k=40, top_p=0.9, seed=0)
    for n in (1, 3, 5):
        gpu.reset()
        logits = gpu.forward(TOKENS[:n])
        found = head_of(logits, sp.temperature, gpu.sampling_head)
        assert np.array_equal(found.values, -np.sort(-logits, axis=-1)[:, : CANDIDATES + 1])
    tokens = gpu.tokenize(PROMPT, special=True)
    head = gpu.sampling_head
    for k in (0, 4):
        outs = []
        for gpu.sampling_head in (head, None, head):
            draft = OnnxRuntime(folders["draft"], n_ctx=256)
            drafters = [ModelDrafter(draft)] if k else []
            decoder = SpeculativeDecoder(gpu, drafters, FixedPolicy("model" if k else None, k))
            outs.append(decoder.generate(tokens, max_tokens=40, sp=sp).tokens)
        assert outs[0] == outs[1] == outs[2], k
