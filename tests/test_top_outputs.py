"""Greedy steps read each row's argmax and its probability from the graph (top outputs).

An ONNX graph exported for the GPU also outputs top_id and top_p, so a greedy verify or
draft step copies [rows] numbers to the host instead of [rows, V] logits. Checked on the CPU
EP against the same weights exported without them (identical float32 logits):
- top_id equals np.argmax of the logits exactly, ties included (the first maximum);
- top_p equals the host's softmax probability within 1e-5 relative (float32 sums in another
  order; measured ~1e-7);
- greedy output, and every draft the model proposes and where it ends, are the same.
The graph's two-stage max (first_max: ReduceMax/ArgMax over blocks of MAX_BLOCK columns, not
over the row, which ONNX Runtime's CUDA EP reduces slowly at widths >= 2) is held to the
one-stage graph it replaced at every width 1..17: the same ids exactly (ties within and
across blocks, a maximum in the last, padded block, rows below zero) and probabilities within
1e-6 relative (fp16 compute: within fp16 rounding), for vocabularies MAX_BLOCK divides and
does not; and no reduction in it spans more than max(MAX_BLOCK, blocks) columns.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter, NgramDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.runtime import TopRows, forward_top, top_of

pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime (edgespec[onnx])")
pytest.importorskip("onnx", reason="the ONNX exporter needs onnx (edgespec[onnx])")

from edgespec.export.onnx_export import MAX_BLOCK, GraphBuilder, export_onnx, top_outputs  # noqa: E402
from edgespec.export.onnx_standard import StandardGraphBuilder  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxOptions, OnnxRuntime  # noqa: E402
from tests.test_draft_vocab import record_proposals  # noqa: E402
from tests.test_onnx import PROMPT, TOKENS, cuda_available  # noqa: E402
from tests.tiny_hf import make_tiny_hf, noisy_copy  # noqa: E402

TIED = (3, 7)  # lm_head rows made equal (and large): their logits tie, often at the top


def with_head(hf: Path, folder: Path, change) -> Path:
    """A copy of the checkpoint whose lm_head went through change(w) (in place)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(hf, folder)
    tensors = load_file(hf / "model.safetensors")
    change(tensors["lm_head.weight"])
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def tie_rows(w: np.ndarray) -> None:
    w[TIED[0]] *= 4.0
    w[TIED[1]] = w[TIED[0]]


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def hf(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp(request.param)
    return with_head(make_tiny_hf(root / "base", arch=request.param, seed=3), root / "hf", tie_rows)


@pytest.fixture(scope="module")
def pair(hf, tmp_path_factory) -> dict[str, OnnxRuntime]:
    """The target and a noisy draft, each exported with and without top outputs."""
    root = tmp_path_factory.mktemp("onnx")
    draft_hf = noisy_copy(hf, root / "draft_hf")
    out = {}
    for name, source in (("target", hf), ("draft", draft_hf)):
        for top in (False, True):
            folder = export_onnx(source, root / f"{name}-{top}", top_outputs=top)
            out[f"{name}+top" if top else name] = OnnxRuntime(folder, n_ctx=256)
    return out


def device_top(runtime: OnnxRuntime, tokens: list[int], **kw) -> TopRows:
    runtime.reset()
    assert runtime.top_outputs
    return runtime.forward_top(tokens, **kw)


def host_top(runtime: OnnxRuntime, tokens: list[int], **kw) -> TopRows:
    runtime.reset()
    return top_of(runtime.forward(tokens, **kw))


def count_logit_reads(runtime: OnnxRuntime) -> list[int]:
    """The list each read of a step's logits appends its row count to, from now on."""
    reads: list[int] = []
    read = runtime.read_logits
    runtime.read_logits = lambda step: reads.append(step.rows) or read(step)  # type: ignore
    return reads


def assert_same_top(got: TopRows, want: TopRows) -> None:
    assert got.ids.tolist() == want.ids.tolist()
    assert got.prob is not None and want.prob is not None
    np.testing.assert_allclose(got.prob, want.prob, rtol=1e-5)


def test_top_outputs_are_the_argmax_and_probability_of_every_row(pair):
    plain, top = pair["target"], pair["target+top"]
    assert not plain.top_outputs
    for n in (1, 2, 3, 5, len(TOKENS)):
        assert_same_top(device_top(top, TOKENS[:n]), host_top(plain, TOKENS[:n]))
        assert_same_top(
            device_top(top, TOKENS[:n], last_only=True), host_top(plain, TOKENS[:n], last_only=True)
        )
    # steps after a cached prefix, as verify and draft steps run
    top.reset(), plain.reset()
    top.forward(TOKENS[:6]), plain.forward(TOKENS[:6])
    assert_same_top(top.forward_top(TOKENS[6:]), top_of(plain.forward(TOKENS[6:])))


def test_a_tie_goes_to_the_first_maximum_as_on_the_host(pair):
    """TIED's two rows give bitwise equal logits; where they lead, top_id is the lower id."""
    pair["target"].reset()
    rows = pair["target"].forward(list(range(40, 140)))
    first, second = rows[:, TIED[0]], rows[:, TIED[1]]
    assert (first == second).all()
    leading = rows.max(axis=1) == first
    assert leading.sum() >= 5, "the tied rows should lead somewhere, or the test shows nothing"
    got = device_top(pair["target+top"], list(range(40, 140)))
    assert got.ids[leading].tolist() == [TIED[0]] * int(leading.sum())
    assert got.ids.tolist() == np.argmax(rows, axis=1).tolist()


def test_padded_and_chunked_steps_read_their_real_rows(hf, pair, tmp_path):
    folder = Path(pair["target+top"].path)
    want = host_top(pair["target"], TOKENS)
    for opts in (OnnxOptions(row_multiple=2), OnnxOptions(min_width=4)):
        runtime = OnnxRuntime(folder, n_ctx=64, options=opts)
        assert_same_top(device_top(runtime, TOKENS[:5]), host_top(pair["target"], TOKENS[:5]))
        assert_same_top(device_top(runtime, TOKENS), want)
    padded = OnnxRuntime(folder, n_ctx=64, options=OnnxOptions(min_width=8))  # row 5 of 8
    last = host_top(pair["target"], TOKENS[:5], last_only=True)
    assert_same_top(device_top(padded, TOKENS[:5], last_only=True), last)
    small_batch = OnnxRuntime(folder, n_ctx=64, options=OnnxOptions(n_batch=4))  # a long catch-up
    last = device_top(small_batch, TOKENS, last_only=True)
    assert_same_top(last, TopRows(want.ids[-1:], want.prob[-1:]))
    assert small_batch.n_past == len(TOKENS)
    with pytest.raises(ValueError, match="at most n_batch=4 rows"):
        device_top(small_batch, TOKENS)


def test_a_draft_cut_to_the_targets_ids_never_proposes_past_them(hf, tmp_path):
    """width: a draft padded past the target's ids reduces its logits on the host, cut."""

    def last_row_leads(w: np.ndarray) -> None:
        w[-1] = 2.0 * w[TIED[0]]  # leads wherever the tied rows' logit is high

    runtime = OnnxRuntime(
        export_onnx(
            with_head(hf, tmp_path / "hf", last_row_leads), tmp_path / "o", top_outputs=True
        ),
        n_ctx=64,
    )
    n = runtime.n_vocab - 1
    assert (device_top(runtime, TOKENS).ids == n).any(), "the last row should lead somewhere"
    runtime.reset()
    cut = forward_top(runtime, TOKENS, with_prob=True, width=n)
    runtime.reset()
    assert_same_top(cut, top_of(runtime.forward(TOKENS)[:, :n]))


# --- the top outputs' graph alone, against the one-stage graph it replaced -------------------

WIDTHS = range(1, 18)
VOCABS = (5, 384, 385, 1000)  # under one block, whole blocks, one column over, a partial block


def one_stage_top_outputs(g: GraphBuilder, logits: str, n_columns: int) -> None:
    """top_outputs before issue 44: ReduceMax and ArgMax over each whole row."""
    from onnx import TensorProto, helper

    peak = g.op("ReduceMax", logits, "axis_last", keepdims=1)
    total = g.op("ReduceSum", g.op("Exp", g.op("Sub", logits, peak)), "axis_last", keepdims=0)
    top = {"top_id": (g.op("ArgMax", logits, axis=-1, keepdims=0), TensorProto.INT64),
           "top_p": (g.op("Reciprocal", total), TensorProto.FLOAT)}  # fmt: skip
    for name, (value, dtype) in top.items():
        g.nodes.append(helper.make_node("Identity", [value], [name], name=name))
        g.outputs.append(helper.make_tensor_value_info(name, dtype, [1, "n_logits"]))


def top_graph(n_columns: int, dtype: type, build=top_outputs):
    """The top outputs of logits [1, rows, n_columns] in the compute dtype, cast to float32
    first where it is not (as build_decoder does)."""
    from onnx import helper

    g = GraphBuilder("fp32", dtype)
    g.const("axis_last", np.array([-1], np.int64))
    g.inputs.append(helper.make_tensor_value_info("x", g.onnx_type, [1, "n_logits", n_columns]))
    build(g, "x" if dtype == np.float32 else g.cast("x", np.float32), n_columns)
    return g.model()


def hard_rows(n_columns: int, width: int, dtype: type) -> np.ndarray:
    """[width, n_columns] rows, each of one of the cases first_max could get wrong."""
    rng = np.random.default_rng(n_columns * 100 + width)

    def case(i: int) -> np.ndarray:
        row = rng.standard_normal(n_columns).astype(np.float32)
        top = row.max() + 1.0
        if i == 1:  # every logit below zero, and so below a zero of padding
            row -= 10.0
        elif i == 2:  # a tie inside one block
            start = n_columns // 2 // MAX_BLOCK * MAX_BLOCK
            row[[start + 1, min(start + MAX_BLOCK, n_columns) - 1]] = top
        elif i == 3:  # a tie across blocks: the first block's wins
            row[[n_columns - 1, min(MAX_BLOCK, n_columns - 1), 0]] = top
        elif i == 4:  # the maximum in the last column: the padded block's when it has one
            row[n_columns - 1] = top
        elif i == 5:  # every column ties
            row[:] = -1.5
        return row

    return np.stack([case((j + width) % 6) for j in range(width)]).astype(dtype)


def run_top(session, rows: np.ndarray) -> TopRows:
    ids, prob = session.run(["top_id", "top_p"], {"x": rows[None]})
    return TopRows(ids[0], prob[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("n_columns", VOCABS)
def test_the_two_stage_top_outputs_are_the_one_stage_ones_at_every_width(n_columns, dtype):
    import onnxruntime as ort

    def session(build):
        model = top_graph(n_columns, dtype, build).SerializeToString()
        return ort.InferenceSession(model, providers=["CPUExecutionProvider"])

    two, one = session(top_outputs), session(one_stage_top_outputs)
    rtol = 1e-6 if dtype == np.float32 else 2.0**-11
    for width in WIDTHS:
        rows = hard_rows(n_columns, width, dtype)
        got, want = run_top(two, rows), run_top(one, rows)
        assert got.ids.tolist() == want.ids.tolist() == np.argmax(rows, -1).tolist(), width
        np.testing.assert_allclose(got.prob, want.prob, rtol=rtol, err_msg=f"width {width}")
        z = rows.astype(np.float64) - rows.max(-1, keepdims=True)
        np.testing.assert_allclose(got.prob, 1 / np.exp(z).sum(-1), rtol=1e-5)


def test_no_reduction_of_the_top_outputs_spans_a_row():
    """Over Qwen2's 151,936 logits, the ReduceMax and ArgMax nodes reduce MAX_BLOCK columns
    (a block's), except the ArgMax over the 1,187 blocks' maxima: never the row (shapes from
    ONNX's shape inference)."""
    import onnx

    model = onnx.shape_inference.infer_shapes(top_graph(151_936, np.float16))
    shapes = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim]
              for v in [*model.graph.value_info, *model.graph.input]}  # fmt: skip
    reduced = {n.name: shapes[n.input[0]][-1] for n in model.graph.node
               if n.op_type in ("ReduceMax", "ArgMax")}  # fmt: skip
    assert sorted(reduced.values()) == [MAX_BLOCK] * 3 + [151_936 // MAX_BLOCK], reduced


@pytest.mark.gpu
def test_on_cuda_the_two_stage_top_outputs_keep_the_first_maximum():
    """On the CUDA EP (cuDNN's ArgMax in both stages): the ids of the hard rows at every width,
    ties included, over the tests' vocabularies and Qwen2's."""
    import onnxruntime as ort

    reason = cuda_available()
    if reason:
        pytest.skip(f"the two-stage top outputs on CUDA not tested: {reason}")
    for n_columns in (*VOCABS, 151_936):
        model = top_graph(n_columns, np.float16).SerializeToString()
        gpu = ort.InferenceSession(model, providers=["CUDAExecutionProvider"])
        for width in WIDTHS:
            rows = hard_rows(n_columns, width, np.float16)
            got = run_top(gpu, rows)
            assert got.ids.tolist() == np.argmax(rows, -1).tolist(), (n_columns, width)
            z = rows.astype(np.float64) - rows.max(-1, keepdims=True)
            np.testing.assert_allclose(got.prob, 1 / np.exp(z).sum(-1), rtol=1e-4)


@pytest.mark.parametrize("confidence", [0.0, 0.5])
def test_greedy_decoding_and_every_draft_are_the_same_with_top_outputs(pair, confidence):
    tokens = pair["target"].tokenize(PROMPT, special=True)
    runs = {}
    for suffix in ("", "+top"):
        target, draft = pair["target" + suffix], pair["draft" + suffix]
        plain = SpeculativeDecoder(target).generate(tokens, max_tokens=40, speculative=False)
        drafter = ModelDrafter(draft, confidence=confidence)
        proposed = record_proposals(drafter)
        ends: list[bool] = []
        observe = drafter.propose

        def propose(*a, observe=observe, ends=ends):
            d = observe(*a)
            ends.append(d.unsure_end)
            return d

        drafter.propose = propose
        decoder = SpeculativeDecoder(target, [drafter, NgramDrafter()], FixedPolicy("model", 4))
        reads = count_logit_reads(target)
        out = decoder.generate(tokens, max_tokens=40)
        assert out.tokens == plain.tokens
        # with top outputs the target's logits leave the graph for the prompt's pass only
        assert (len(reads) == 1) == bool(suffix), reads
        runs[suffix] = (plain.tokens, proposed, ends)
    assert runs["+top"] == runs[""]
    assert any(runs[""][2]) == (confidence > 0)  # gated drafts did end where unsure


def test_the_cuda_export_has_top_outputs_and_tensorrts_has_none(hf, tmp_path):
    fp16 = export_onnx(hf, tmp_path / "fp16", quant="fp16", compute="fp16")
    assert json.loads((fp16 / "model.json").read_text())["top_outputs"] is True
    assert OnnxRuntime(fp16, n_ctx=64).top_outputs
    fp32 = export_onnx(hf, tmp_path / "fp32")
    assert json.loads((fp32 / "model.json").read_text())["top_outputs"] is False
    with pytest.raises(ValueError) as e:
        export_onnx(hf, tmp_path / "trt", builder=StandardGraphBuilder, top_outputs=True)
    assert str(e.value) == "top outputs are for the ONNX Runtime flavour, not standard"


@pytest.mark.gpu
def test_cuda_steps_read_top_outputs_and_decode_as_plain(hf, pair, tmp_path):
    """On the CUDA EP (CUDA graphs on), the greedy steps' top_id is the argmax of the same
    run's logits, and speculative output equals plain decoding's."""
    reason = cuda_available()
    if reason:
        pytest.skip(f"top outputs on CUDA not tested: {reason}")
    folder = export_onnx(hf, tmp_path / "fp16", quant="fp16", compute="fp16")
    gpu = OnnxRuntime(folder, n_ctx=256, providers=["CUDAExecutionProvider"])
    assert gpu.on_cuda and gpu.cuda_graph and gpu.top_outputs
    for n in (1, 3, 5):
        gpu.reset()
        logits = gpu.forward(TOKENS[:n])
        gpu.reset()
        top = gpu.forward_top(TOKENS[:n])
        assert top.ids.tolist() == np.argmax(logits, axis=1).tolist()
        np.testing.assert_allclose(top.prob, top_of(logits).prob, rtol=1e-4)
    tokens = gpu.tokenize(PROMPT, special=True)
    ref = SpeculativeDecoder(gpu).generate(tokens, max_tokens=40, speculative=False)
    for k in (4, 2, 4):
        out = SpeculativeDecoder(
            gpu, [ModelDrafter(pair["draft"])], FixedPolicy("model", k)
        ).generate(tokens, max_tokens=40)
        assert out.tokens == ref.tokens


def test_doctor_says_what_a_greedy_step_copies(pair):
    from edgespec.app.doctor import greedy_rows_status

    assert greedy_rows_status(pair["target+top"]) == (
        "greedy steps read each row's argmax from the graph"
    )
    assert greedy_rows_status(pair["target"]) == (
        "greedy steps copy every row's logits to the host (it has no top outputs: export it "
        "again with --device cuda)"
    )
