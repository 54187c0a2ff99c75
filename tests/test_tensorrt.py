"""`--format tensorrt`: the bundle, the engine build plan, the refusals, the ONNX Runtime
fallback (all on the CPU, for real), and the TensorRT runtime itself (marked gpu: it needs
TensorRT or TensorRT for RTX and a CUDA GPU, and skips with the reason where they are absent).

Bounds:
- the FP16 fallback graph (INT4 block DQ folded to constants) vs the INT4 graph, float32
  compute: max |diff| < 1e-5 (the same values, dequantized in numpy instead of in the graph).
- on a GPU, the engine's logits vs ONNX Runtime on the same ONNX: < 0.05 (fp16 compute on
  both; not yet run: no GPU in the session that wrote this).
Greedy speculative output equals plain output token for token on every back-end.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter
from edgespec.engine import SpeculativeDecoder
from edgespec.errors import EdgespecError, ModelFileError

pytest.importorskip("onnxruntime", reason="the fallback runs on onnxruntime (edgespec[onnx])")
onnx = pytest.importorskip("onnx", reason="the exporter needs onnx (edgespec[onnx])")

from edgespec.app.cli import main  # noqa: E402
from edgespec.bundle import read_bundle  # noqa: E402
from edgespec.export.onnx_export import export_onnx  # noqa: E402
from edgespec.export.onnx_standard import StandardGraphBuilder  # noqa: E402
from edgespec.export.trt_build import dequantize_int4_graph  # noqa: E402
from edgespec.export.trt_plan import (  # noqa: E402
    build_script,
    parse_widths,
    plan_engine,
    precision_for_device,
)
from edgespec.loader import SpecOptions, load_decoder  # noqa: E402
from edgespec.runtimes import tensorrt  # noqa: E402
from edgespec.runtimes.onnxrt_standard import StandardOnnxRuntime  # noqa: E402
from edgespec.runtimes.tensorrt import import_tensorrt  # noqa: E402
from tests.tiny_hf import make_tiny_hf, noisy_copy  # noqa: E402

TOKENS = [5, 17, 42, 99, 150, 7, 33, 250, 12, 64]
PROMPT = "def add(a, b):\n    return a + b\nfor item in items:\n"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """`edgespec export --format tensorrt` of a tiny target and a noisy draft, on the CPU."""
    root = tmp_path_factory.mktemp("trt")
    hf = make_tiny_hf(root / "hf", arch="qwen2", seed=5)
    draft = noisy_copy(hf, root / "draft_hf")
    out = root / "bundle"
    args = ["export", "--format", "tensorrt", "--target", str(hf), "--draft", str(draft),
            "--out", str(out), "--verify-widths", "1..5", "--int4-block", "32"]  # fmt: skip
    assert main(args) == 0
    return out


# --- the bundle, without TensorRT ------------------------------------------------------------


def test_the_export_writes_standard_onnx_a_plan_and_a_build_script(bundle, capsys):
    b = read_bundle(bundle)
    assert [(m.role, m.format, m.quant, m.path) for m in b.models] == [
        ("target", "tensorrt", "int4", "target.int4"),
        ("draft", "tensorrt", "fp16", "draft.fp16"),
    ]
    assert b.policy["tensorrt"] == {
        "widths": [1, 2, 3, 4, 5], "capacity": 512, "prefill_max": 512, "engines": {}
    }  # fmt: skip
    assert b.policy["reason"].startswith("no GPU seen here: INT4 block weights")
    info = json.loads((bundle / "target.int4" / "model.json").read_text())
    assert (info["flavour"], info["compute"]) == ("standard", "fp16")
    plans = json.loads((bundle / "engines" / "plan.json").read_text())
    assert [p["role"] for p in plans] == ["target", "draft"]
    script = (bundle / "build_engines.sh").read_text()
    assert "exec python3 -m edgespec.export.trt_build ." in script
    assert "--saveEngine=engines/target.int4.engine" in script


def test_the_cli_says_how_to_finish_on_the_device(tmp_path, capsys):
    hf = make_tiny_hf(tmp_path / "hf", seed=1)
    out = tmp_path / "b"
    assert main(["export", "--format", "tensorrt", "--target", str(hf), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (
        "  engines: not built here (neither tensorrt nor tensorrt_rtx imports); the bundle runs "
        f"as is on ONNX Runtime. On the device that will run it: bash {out / 'build_engines.sh'}"
    ) in printed


def test_a_tensorrt_bundle_runs_on_onnx_runtime_and_says_so_once(bundle, caplog):
    tensorrt._fallback_said = False
    with caplog.at_level(logging.WARNING):
        decoder = load_decoder(bundle, spec=SpecOptions(drafter="model", k=3))
    said = [r.getMessage() for r in caplog.records if "ONNX Runtime" in r.getMessage()]
    assert said == [
        f"{bundle / 'target.int4'}: running the TensorRT bundle's ONNX on ONNX Runtime: it has "
        "no engine (run the bundle's build_engines.sh on the device)"
    ]  # once for both roles
    assert type(decoder.target) is StandardOnnxRuntime
    tokens = decoder.target.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(decoder.target).generate(tokens, max_tokens=24, speculative=False)
    out = decoder.generate(tokens, max_tokens=24)
    assert out.tokens == plain.tokens and out.stats.n_draft_tokens > 0


def test_edgespec_run_works_on_the_bundle(bundle, capsys):
    assert main(["run", "--target", str(bundle), "--prompt", PROMPT, "--max-tokens", "8"]) == 0
    assert capsys.readouterr().out.strip()


# --- the plan ----------------------------------------------------------------------------------


def test_the_plan_has_a_prompt_profile_and_one_fixed_profile_per_width(bundle):
    plan = plan_engine(bundle, "target", "target.int4", (1, 2, 3), capacity=256, prefill_max=64)
    assert [p.name for p in plan.profiles] == ["prefill", "width1", "width2", "width3"]
    prefill, width2 = plan.profiles[0].shapes, plan.profiles[2].shapes
    assert prefill["input_ids"] == ((1, 1), (1, 64), (1, 64))
    assert prefill["logit_rows"] == ((1,), (1,), (64,))
    assert width2["input_ids"] == ((1, 2),) * 3 and width2["logit_rows"] == ((2,),) * 3
    kv = (1, 2, 256, 16)
    assert width2["past_key_values.1.value"] == prefill["past_key_values.1.value"] == (kv,) * 3
    assert len(prefill) == 3 + 2 * 2  # ids, position, rows + k/v of 2 layers
    assert plan.engine == "engines/target.int4.engine"
    assert {(w.precision, w.qdq) for w in plan.weights} == {
        ("int4", "DequantizeLinear axis 0, block 32")
    }
    assert [w.tensor for w in plan.weights][-1] == "lm_head.weight.q4"
    draft = plan_engine(bundle, "draft", "draft.fp16", (1,))
    assert {(w.precision, w.qdq) for w in draft.weights} == {("fp16", "none")}
    assert draft.activations["RMSNorm, attention scores and softmax"] == "fp32"


def test_every_profile_covers_every_graph_input(bundle):
    plan = plan_engine(bundle, "target", "target.int4", (1, 2))
    graph = onnx.load(str(bundle / "target.int4" / "model.onnx"), load_external_data=False).graph
    inputs = {i.name for i in graph.input}
    assert all(set(p.shapes) == inputs for p in plan.profiles)


def test_engines_built_by_trtexec_are_described_into_the_bundle(bundle, tmp_path, caplog):
    import shutil

    from edgespec.export.trt_build import build_bundle_engines

    copy = Path(shutil.copytree(bundle, tmp_path / "b"))
    with pytest.raises(EdgespecError, match="target.int4.engine is missing: build it first"):
        build_bundle_engines(copy, describe_only=True)
    for name in ("target.int4", "draft.fp16"):
        (copy / "engines" / f"{name}.engine").write_bytes(b"not a real engine")
    build_bundle_engines(copy, describe_only=True)
    target = read_bundle(copy).policy["tensorrt"]["engines"]["target"]
    assert target == json.loads((copy / "engines" / "target.int4.json").read_text())
    assert {k: target[k] for k in ("engine", "capacity", "widths", "prefill_max")} == {
        "engine": "target.int4.engine", "capacity": 512, "widths": [1, 2, 3, 4, 5],
        "prefill_max": 512,
    }  # fmt: skip
    if import_tensorrt() is None:
        tensorrt._fallback_said = False
        with caplog.at_level(logging.WARNING):
            load_decoder(copy, spec=SpecOptions(drafter="ngram", k=2))
        assert (
            caplog.records[-1]
            .getMessage()
            .endswith(
                "running the TensorRT bundle's ONNX on ONNX Runtime: TensorRT is not installed"
            )
        )


def test_precision_follows_the_compute_capability():
    orin, thor = precision_for_device((8, 7)), precision_for_device((11, 0))
    assert (orin.target, orin.draft) == ("int4", "fp16")
    assert orin.reason == (
        "compute capability 8.7: no FP8 tensor cores, INT4 block weights (weight-only)"
    )
    assert (thor.target, thor.draft) == ("fp8", "fp16")
    assert precision_for_device((8, 9), "fp16").target == "fp16"
    with pytest.raises(EdgespecError) as e:
        precision_for_device((8, 7), "fp8")
    assert str(e.value) == (
        "--target-quant fp8 needs FP8 tensor cores (compute capability 8.9 or newer); this "
        "GPU has compute capability 8.7: use --target-quant int4 (or fp16)"
    )
    with pytest.raises(EdgespecError, match="'q4_0' is not available for --format tensorrt"):
        precision_for_device(None, "q4_0")


def test_verify_widths_parse_or_are_refused():
    assert parse_widths("1..4") == (1, 2, 3, 4) and parse_widths("3,1,2") == (1, 2, 3)
    with pytest.raises(EdgespecError) as e:
        parse_widths("0..4")
    assert str(e.value) == (
        "--verify-widths '0..4' is not a range of widths between 1 and 64; write it as 1..9 "
        "(k + 1 for k up to 8) or as a list: 1,2,3,5"
    )


def test_the_trtexec_fallback_spells_every_profile(bundle):
    plan = plan_engine(bundle, "draft", "draft.fp16", (1, 2), capacity=128, prefill_max=32)
    script = build_script([plan])
    assert script.count("--minShapes=") == 3  # prefill, width1, width2
    assert "--maxShapes=input_ids:1x32,logit_rows:32,position:1," in script
    assert "past_key_values.0.key:1x2x128x16" in script


# --- refusals ----------------------------------------------------------------------------------


def test_an_engine_for_another_device_is_refused(bundle):
    meta = {"engine": "target.int4.engine", "flavour": "tensorrt", "version": "10.3.0",
            "compute_capability": "8.7", "device": "Orin"}  # fmt: skip
    tensorrt.check_engine(bundle / "target.int4", meta, "tensorrt", "10.3.0", ("Orin", (8, 7)))
    with pytest.raises(ModelFileError) as e:
        tensorrt.check_engine(
            bundle / "target.int4", meta, "tensorrt_rtx", "1.7.1", ("RTX 4090", (8, 9))
        )
    assert str(e.value) == (
        f"{bundle / 'engines' / 'target.int4.engine'} was built with tensorrt 10.3.0 for "
        "compute capability 8.7 (Orin); this machine has tensorrt_rtx 1.7.1 and compute "
        f"capability 8.9 (RTX 4090): rebuild the engines here with bash "
        f"{bundle / 'build_engines.sh'}"
    )


def test_building_engines_without_tensorrt_is_refused_with_the_ways_out(bundle):
    if import_tensorrt() is not None:
        pytest.skip("TensorRT is installed here")
    from edgespec.export.trt_build import build_bundle_engines

    with pytest.raises(EdgespecError, match="neither tensorrt nor tensorrt_rtx imports here"):
        build_bundle_engines(bundle)


# --- the INT4 fallback for a TensorRT that refuses INT4 block DQ ------------------------------


def test_the_fp16_fallback_graph_computes_what_the_int4_graph_does(tmp_path):
    hf = make_tiny_hf(tmp_path / "hf", seed=2)
    int4 = export_onnx(
        hf, tmp_path / "int4", quant="int4", builder=StandardGraphBuilder, block_size=32
    )
    folded = dequantize_int4_graph(int4 / "model.onnx", tmp_path / "folded")
    for name in ("model.json", "tokenizer.json", "tokenizer_config.json"):
        (folded / name).write_bytes((int4 / name).read_bytes())
    ops = {n.op_type for n in onnx.load(str(folded / "model.onnx")).graph.node}
    assert "DequantizeLinear" not in ops
    want = StandardOnnxRuntime(int4, n_ctx=64).forward(TOKENS)
    assert np.abs(StandardOnnxRuntime(folded, n_ctx=64).forward(TOKENS) - want).max() < 1e-5


# --- on a GPU with TensorRT ------------------------------------------------------------------


def gpu_runtime_or_skip(bundle: Path):
    found = import_tensorrt()
    if found is None:
        pytest.skip("needs TensorRT or TensorRT for RTX (pip install tensorrt-rtx-cu13)")
    if tensorrt.gpu_properties() is None:
        pytest.skip("needs a CUDA GPU")
    from edgespec.export.trt_build import build_bundle_engines

    if not (bundle / "engines" / "target.int4.json").is_file():
        build_bundle_engines(bundle)
    return found


@pytest.mark.gpu
def test_engine_logits_match_onnx_runtime_and_graph_replays_agree(bundle):
    from edgespec.backends import RuntimeOptions, open_runtime

    gpu_runtime_or_skip(bundle)
    engine = open_runtime(bundle / "target.int4", RuntimeOptions(n_ctx=256, device="cuda"))
    assert type(engine) is tensorrt.TensorRTRuntime
    ref = StandardOnnxRuntime(bundle / "target.int4", n_ctx=256).forward(TOKENS)
    assert np.abs(engine.forward(TOKENS) - ref).max() < 0.05
    for _ in range(3):  # widths 1..5 captured on first use, replayed after, both parities
        engine.rollback(4)
        steps = [engine.forward(TOKENS[i:j]) for i, j in ((4, 6), (6, 7), (7, 10))]
        assert np.abs(np.concatenate(steps) - ref[4:]).max() < 0.05


@pytest.mark.gpu
def test_greedy_speculative_equals_plain_on_the_engines(bundle):
    from edgespec.backends import RuntimeOptions, open_runtime

    gpu_runtime_or_skip(bundle)
    options = RuntimeOptions(n_ctx=256, device="cuda")
    target = open_runtime(bundle / "target.int4", options)
    draft = open_runtime(bundle / "draft.fp16", options)
    assert type(draft) is tensorrt.TensorRTRuntime
    tokens = target.tokenize(PROMPT, special=True)
    plain = SpeculativeDecoder(target).generate(tokens, max_tokens=32, speculative=False)
    drafter = ModelDrafter(draft)
    out = SpeculativeDecoder(target, [drafter], FixedPolicy("model", 4)).generate(
        tokens, max_tokens=32
    )
    assert out.tokens == plain.tokens and out.stats.n_draft_tokens > 0


@pytest.mark.gpu
def test_graphs_captured_at_load_leave_the_cache_as_it_was(bundle):
    from edgespec.backends import RuntimeOptions, open_runtime

    gpu_runtime_or_skip(bundle)
    engine = open_runtime(bundle / "target.int4", RuntimeOptions(n_ctx=256, device="cuda"))
    ref = StandardOnnxRuntime(bundle / "target.int4", n_ctx=256).forward(TOKENS)
    engine.forward(TOKENS[:4])
    widths = sorted(engine.by_width)
    assert engine.capture_graphs([(w, w) for w in widths] + [(2, 1)]) == 2 * len(widths)
    assert engine.n_past == 4
    steps = [engine.forward(TOKENS[i:j]) for i, j in ((4, 6), (6, 7), (7, 10))]
    assert np.abs(np.concatenate(steps) - ref[4:]).max() < 0.05
    assert engine.capture_graphs([(w, w) for w in widths]) == 0


class FakeCuda:
    """The Cuda calls TensorRTRuntime.run makes, recorded instead of made."""

    handle = 0

    def __init__(self) -> None:
        self.calls: list[str] = []

    def to_device(self, dst: int, array: np.ndarray) -> None:
        pass

    def to_host(self, dst: int, src: int, nbytes: int) -> None:
        pass

    def sync(self) -> None:
        pass

    def capture(self, launch) -> str:
        launch()
        self.calls.append("capture")
        return f"graph {len(self.calls)}"

    def replay(self, graph: str) -> None:
        self.calls.append("replay " + graph)


class FakeContext:
    def set_tensor_address(self, name: str, address: int) -> None:
        pass

    def set_input_shape(self, name: str, shape: tuple) -> None:
        pass

    def execute_async_v3(self, stream: int) -> bool:
        return True


def engine_without_a_gpu(widths: tuple[int, ...], n_past: int, n_ctx: int):
    """TensorRTRuntime's own run() over a recording stand-in for CUDA and TensorRT."""
    rt = tensorrt.TensorRTRuntime.__new__(tensorrt.TensorRTRuntime)
    rt.cuda, rt.n_vocab, rt.n_past, rt.n_ctx, rt.parity = FakeCuda(), 8, n_past, n_ctx, 0
    rt.ids = rt.position = rt.rows = rt.logits = 0
    rt.kv_sets = [{"0.key": 1, "0.value": 2}, {"0.key": 3, "0.value": 4}]
    rt.host_logits = np.zeros((max(widths), rt.n_vocab), np.float32)
    rt.contexts = [tensorrt.Context(FakeContext(), 0, None, {})] + [
        tensorrt.Context(FakeContext(), i + 1, w, {}) for i, w in enumerate(widths)
    ]
    rt.by_width = {c.width: c for c in rt.contexts if c.width is not None}
    return rt


def test_capture_at_load_makes_each_widths_graph_for_both_kv_parities():
    """capture_graphs on a TensorRT runtime (serve and bench ask for it): every width's
    graph for both buffer parities, nothing for the last-row or prompt shapes, n_past and
    the parity as they were, nothing twice, widths past the context skipped."""

    rt = engine_without_a_gpu((1, 2, 3), n_past=7, n_ctx=10)
    assert rt.capture_graphs([(1, 1), (2, 2), (3, 3), (4, 4), (2, 1)]) == 6
    assert [sorted(c.graphs) for c in rt.contexts] == [[], [0, 1], [0, 1], [0, 1]]
    assert (rt.n_past, rt.parity) == (7, 0)
    assert rt.cuda.calls.count("capture") == 6
    assert rt.capture_graphs([(1, 1), (2, 2), (3, 3)]) == 0
    assert rt.cuda.calls.count("capture") == 6
    late = engine_without_a_gpu((1, 2, 3), n_past=8, n_ctx=10)  # room for 2 tokens
    assert late.capture_graphs([(1, 1), (2, 2), (3, 3)]) == 4
    assert [sorted(c.graphs) for c in late.contexts] == [[], [0, 1], [0, 1], []]


def test_the_tensorrt_runtime_takes_the_folders_tokenizer_and_no_onnx_runtime_model_code(bundle):
    """TensorRTRuntime shares ExportedModelFolder with ONNX Runtime, not OnnxRuntime itself:
    the same tokens, text, vocabulary and template from the same folder, the Runtime
    protocol's defaults for the capabilities ONNX Runtime's own code has (an inherited
    capture_graphs once crashed `serve` and `bench` at load), and none of its attributes."""
    from edgespec.runtimes.onnxrt import OnnxRuntime

    rt = tensorrt.TensorRTRuntime.__new__(tensorrt.TensorRTRuntime)
    rt.read_folder(bundle / "target.int4")
    rt.load_vocabulary()
    ref = StandardOnnxRuntime(bundle / "target.int4", n_ctx=256)
    ids = ref.tokenize(PROMPT, special=False)
    assert rt.tokenize(PROMPT, special=False) == ids and len(ids) > 10
    assert rt.detokenize(ids) == ref.detokenize(ids) == PROMPT.encode()
    assert rt.vocab_info() == ref.vocab_info()
    assert rt.chat_template() == ref.chat_template()
    assert (rt.n_vocab, rt.context_size(100_000)) == (ref.n_vocab, ref.context_size(100_000))
    assert not isinstance(rt, OnnxRuntime)
    assert (rt.top_outputs, rt.dists_on_device, rt.logit_ids) == (False, False, None)
    for name in ("sampling_head", "binds_steps", "open_session", "session"):
        assert not hasattr(rt, name), name


def test_doctor_reports_tensorrt_absent_and_the_precision_it_would_pick(capsys):
    if import_tensorrt() is not None or tensorrt.gpu_properties() is not None:
        pytest.skip("TensorRT or a GPU is here: the absent branch does not apply")
    assert main(["doctor"]) == 0
    lines = {line[:24].strip(): line[25:] for line in capsys.readouterr().out.splitlines()}
    assert lines["tensorrt"] == (
        "missing: JetPack ships it (apt install nvidia-tensorrt on a bare system); not "
        "installable from PyPI alone"
    )
    assert lines["tensorrt for RTX"] == "missing: on an RTX GPU, pip install tensorrt-rtx-cu13"
    assert lines["GPU"] == "none visible (no CUDA driver or device)"
    assert lines["engine precision"] == (
        "target int4, draft fp16: no GPU seen here: INT4 block weights, which every TensorRT "
        "target can take (FP16 where a TensorRT version refuses INT4 block DQ); pass "
        "--target-quant fp8 for Thor or RTX 40+"
    )
    assert lines["TensorRT back-end"] == (
        "inactive: a TensorRT bundle runs on ONNX Runtime here (the same standard-operator ONNX)"
    )
