"""The standard-operator ONNX flavour (export/onnx_standard.py: what TensorRT builds from) on
ONNX Runtime's CPU provider (runtimes/onnxrt_standard.py), on tiny checkpoints made in the test.

Bounds, measured on these checkpoints (logits of magnitude ~15):
- fp32 graph vs the float64 numpy reference: max |diff| < 1e-4 (measured ~1e-5).
- int4 graph (signed block DQ, fp16 embedding table) vs the numpy reference over the block
  weights and half embeddings it holds: < 1e-4 (measured ~7e-6).
- fp32, fp16 and fp8 weights vs the ONNX Runtime flavour of the same weights: < 1e-4
  (measured ~6e-6; 0.0 with fp16 compute); int4 is not compared there: that flavour keeps
  its embedding table in INT4 blocks, this one in half.
- rollback and chunked prefill vs one fresh pass: < 1e-5.
Greedy speculative output must equal plain greedy output token for token (float32 graphs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter, NgramDrafter
from edgespec.engine import SpeculativeDecoder
from tests import numpy_reference

pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime (edgespec[onnx])")
onnx = pytest.importorskip("onnx", reason="the ONNX exporter needs onnx (edgespec[onnx])")

from edgespec.backends import RuntimeOptions, open_runtime  # noqa: E402
from edgespec.export.onnx_export import export_onnx  # noqa: E402
from edgespec.export.onnx_standard import StandardGraphBuilder  # noqa: E402
from edgespec.runtimes.onnxrt import OnnxOptions, OnnxRuntime  # noqa: E402
from edgespec.runtimes.onnxrt_standard import StandardOnnxRuntime  # noqa: E402
from tests.test_onnx import ort_int4_roundtrip, with_weights  # noqa: E402
from tests.tiny_hf import make_tiny_hf, noisy_copy  # noqa: E402

TOKENS = [5, 17, 42, 99, 150, 7, 33, 250, 12, 64]
CONTRIB = {"GroupQueryAttention", "MatMulNBits", "GatherBlockQuantized", "Attention"}


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def checkpoint(request, tmp_path_factory) -> Path:
    return make_tiny_hf(tmp_path_factory.mktemp(request.param), arch=request.param, seed=3)


def standard(checkpoint: Path, folder: Path, quant: str = "fp32", **kw) -> Path:
    return export_onnx(
        checkpoint, folder, quant=quant, builder=StandardGraphBuilder, block_size=32, **kw
    )


def test_fp32_logits_match_the_numpy_reference(checkpoint, tmp_path):
    got = StandardOnnxRuntime(standard(checkpoint, tmp_path), n_ctx=64).forward(TOKENS)
    ref = numpy_reference.forward(checkpoint, TOKENS)
    assert got.shape == ref.shape and got.dtype == np.float32
    assert np.abs(got - ref).max() < 1e-4


def test_int4_block_dq_computes_with_its_block_weights(checkpoint, tmp_path):
    fake = with_weights(checkpoint, tmp_path / "fake", lambda _, w: ort_int4_roundtrip(w, 32))
    folder = standard(checkpoint, tmp_path / "int4", "int4")
    got = StandardOnnxRuntime(folder, n_ctx=64).forward(TOKENS)
    assert np.abs(got - numpy_reference.forward(fake, TOKENS)).max() < 1e-4


@pytest.mark.parametrize(
    ("quant", "compute"), [("fp32", "fp32"), ("fp16", "fp32"), ("fp8", "fp32"), ("fp16", "fp16")]
)
def test_it_matches_the_onnx_runtime_flavour(checkpoint, tmp_path, quant, compute):
    std = standard(checkpoint, tmp_path / "std", quant, compute=compute)
    ort = export_onnx(checkpoint, tmp_path / "ort", quant=quant, compute=compute)
    got = StandardOnnxRuntime(std, n_ctx=64).forward(TOKENS)
    assert np.abs(got - OnnxRuntime(ort, n_ctx=64).forward(TOKENS)).max() < 1e-4


def test_the_graph_holds_standard_operators_and_explicit_qdq(checkpoint, tmp_path):
    model = onnx.load(str(standard(checkpoint, tmp_path, "int4") / "model.onnx"))
    onnx.checker.check_model(model)
    ops = {n.op_type for n in model.graph.node}
    assert not ops & CONTRIB and {n.domain for n in model.graph.node} == {""}
    assert {"ScatterElements", "Softmax", "DequantizeLinear"} <= ops
    assert [o.domain for o in model.opset_import] == [""]
    weights = {t.name: t for t in model.graph.initializer}
    dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dq) == 2 * 5 + 1  # qkv, o, gate, up, down in each of 2 layers; lm_head
    for node in dq:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attrs == {"axis": 0, "block_size": 32}
        assert weights[node.input[0]].data_type == onnx.TensorProto.INT4
    inputs = {i.name: i.type.tensor_type.elem_type for i in model.graph.input}
    assert {inputs[n] for n in ("input_ids", "position", "logit_rows")} == {onnx.TensorProto.INT32}


def test_it_takes_no_sampling_head_its_passes_leave_no_bound_step(checkpoint, tmp_path):
    head = OnnxOptions(sampling_head=True)
    rt = StandardOnnxRuntime(standard(checkpoint, tmp_path), n_ctx=64, options=head)
    assert rt.sampling_head is None  # sampled steps reduce its logits on the host


def test_rollback_and_chunks_give_the_fresh_pass(checkpoint, tmp_path):
    rt = StandardOnnxRuntime(
        standard(checkpoint, tmp_path), n_ctx=64, options=OnnxOptions(n_batch=3)
    )
    whole = rt.forward(TOKENS)
    rt.reset()
    first = rt.forward(TOKENS[:6])
    rt.forward([1, 2, 3])  # written into the cache, then dropped
    rt.rollback(6)
    rest = rt.forward(TOKENS[6:])
    assert np.abs(np.concatenate([first, rest]) - whole).max() < 1e-5
    rt.reset()
    assert np.abs(rt.forward(TOKENS, last_only=True) - whole[-1:]).max() < 1e-5


def test_open_runtime_picks_it_from_model_json(checkpoint, tmp_path):
    rt = open_runtime(standard(checkpoint, tmp_path), RuntimeOptions(n_ctx=64))
    assert type(rt) is StandardOnnxRuntime


@pytest.mark.parametrize("kind", ["model", "ngram"])
def test_greedy_speculative_equals_plain(checkpoint, tmp_path, kind):
    target = StandardOnnxRuntime(standard(checkpoint, tmp_path / "t"), n_ctx=256)
    draft_hf = noisy_copy(checkpoint, tmp_path / "draft_hf")
    draft = StandardOnnxRuntime(standard(draft_hf, tmp_path / "d", "fp16"), n_ctx=256)
    tokens = target.tokenize("def add(a, b):\n    return a + b\nfor item in items:\n", special=True)
    ref = SpeculativeDecoder(target).generate(tokens, max_tokens=40, speculative=False)
    drafter = ModelDrafter(draft) if kind == "model" else NgramDrafter()
    out = SpeculativeDecoder(target, [drafter], FixedPolicy(kind, 4)).generate(
        tokens, max_tokens=40
    )
    assert out.tokens == ref.tokens
    assert out.stats.n_draft_tokens > 0
    if kind == "model":
        assert 0.0 < out.stats.acceptance_rate < 1.0
