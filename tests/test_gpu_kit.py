"""The GPU kit (bench/gpu/): its oracle drafter, its CPU smoke run, and llama.cpp on CUDA.

The kit must not rot where no GPU is at hand: the smoke run exercises make_models.py, both
exports, measure.py on both back-ends and the table, on tiny models, in CI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgespec.controller import FixedPolicy
from edgespec.drafters import ModelDrafter
from edgespec.engine import SpeculativeDecoder
from tests.bench_scripts import load_bench_script

REPO = Path(__file__).resolve().parents[1]


def load_measure():
    return load_bench_script("gpu/measure.py", "gpu_measure")


measure = load_measure()
PROMPT = [5, 9, 14, 3, 7]
N = 24


@pytest.fixture(scope="module")
def reference(tiny_runtimes) -> list[int]:
    target, _ = tiny_runtimes
    out = SpeculativeDecoder(target).generate(PROMPT, max_tokens=N, speculative=False)
    assert len(out.tokens) == N  # the tests below need the whole continuation
    return out.tokens


def run_oracle(target, reference, wrong, k, model=None):
    drafter = measure.OracleDrafter(PROMPT, reference, wrong, target.n_vocab, model)
    decoder = SpeculativeDecoder(target, [drafter], FixedPolicy("model", k))
    return decoder.generate(PROMPT, max_tokens=N)


def test_oracle_proposals_are_accepted_exactly_up_to_the_first_wrong_position(
    tiny_runtimes, reference
):
    target, _ = tiny_runtimes
    wrong = np.zeros(N, dtype=bool)
    wrong[[3, 4, 11]] = True
    out = run_oracle(target, reference, wrong, k=4)
    assert out.tokens == reference
    # steps by text position: draft 0-3 keeps 0-2, recovers 3; draft 4-7 keeps none, recovers
    # 4; 5-8 all, bonus 9; 10-13 keeps 10, recovers 11; 12-15 all, bonus 16; 17-20 all, bonus
    # 21; one token of room left for a draft: 22, bonus 23
    assert out.stats.accepted_by_pos == [6, 4, 4, 3]
    assert out.stats.n_accepted == 3 + 0 + 4 + 1 + 4 + 4 + 1


def test_oracle_at_full_acceptance_emits_k_plus_one_per_step(tiny_runtimes, reference):
    target, _ = tiny_runtimes
    out = run_oracle(target, reference, np.zeros(N, dtype=bool), k=3)
    assert out.tokens == reference
    assert out.stats.acceptance_rate == 1.0
    assert out.stats.n_steps == N // 4


def test_oracle_paying_the_draft_cost_runs_the_draft_model(tiny_runtimes, reference):
    target, draft = tiny_runtimes
    model = ModelDrafter(draft)
    wrong = measure.wrong_positions(0.6, N)
    out = run_oracle(target, reference, wrong, k=4, model=model)
    assert out.tokens == reference
    assert model.cached[: len(PROMPT)] == PROMPT  # it forwarded the context as a drafter would
    assert draft.n_past >= len(PROMPT)  # in the draft runtime itself
    assert out.stats.t_draft > 0


def test_wrong_positions_follow_the_acceptance_rate():
    wrong = measure.wrong_positions(0.8, 100_000)
    assert abs(wrong.mean() - 0.2) < 0.005  # binomial sd 0.0013
    assert not measure.wrong_positions(1.0, 1000).any()
    assert (measure.wrong_positions(0.8, 50) == measure.wrong_positions(0.8, 50)).all()


@pytest.mark.slow
def test_the_kit_smoke_run_measures_both_back_ends(tmp_path):
    """bench/gpu/run.sh --smoke on the CPU: tiny models exported to GGUF and ONNX, measured."""
    out = tmp_path / "results"
    proc = subprocess.run(
        ["bash", "bench/gpu/run.sh", "--smoke", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for backend in ("llama", "onnx"):
        report = json.loads((out / f"tiny-{backend}.json").read_text())
        assert report["backend"] == backend
        assert len(report["curve_ms"]) == 5 and report["curve_ratio"][0] == 1.0
        assert set(report["loop"]) == {"greedy", *measure.SAMPLED}
        widths = {m: [x["width"] for x in v] for m, v in report["first_passes"].items()}
        assert widths == {"target": [1, 2, 3, 4, 5], "draft": [1, 2]}
        recovery = report["switch_recovery"]
        assert [w["width"] for w in recovery] == [2, 5]
        assert all(len(w["plain_after_ms"]) == measure.SWITCH_AFTER for w in recovery)
        capture = report["capture_at_load"]  # ONNX Runtime captures graphs on CUDA only
        if backend == "llama":
            assert capture is None
        else:
            assert capture["target"]["graphs"] == capture["draft"]["graphs"] == 0
            after = {m: [x["width"] for x in v] for m, v in capture["first_passes_after"].items()}
            assert after == widths
        keys = {(o["acceptance"], o["draft_cost"], o["k"]) for o in report["oracle"]}
        assert keys == {
            (a, c, k) for a in (1.0, 0.6) for c in ("zero", "real") for k in (1, 4, "auto")
        }
        # a fixed k drafts every step, and at acceptance 1.0 keeps every drafted token (the
        # controller may choose plain steps, which draft nothing)
        fixed = [o for o in report["oracle"] if o["acceptance"] == 1.0 and o["k"] != "auto"]
        assert all(o["acceptance_rate"] == 1.0 for o in fixed if o["identical"])
        assert all(o["identical"] for o in report["oracle"])
        assert "loop_overhead_at_most_5pct_of_verify" in report["goals"]
    head = json.loads((out / "tiny-onnx.json").read_text())["head"]  # exported with --head
    assert (head["file"], head["layers"], len(head["propose_ms_by_k"])) == (
        "head.fp16",
        [0, 1, 1],
        8,
    )
    table = (out / "table.txt").read_text()
    assert "## tiny on llama" in table and "## tiny on onnx" in table


@pytest.mark.gpu
def test_llama_cpp_on_cuda_speculates_exactly(tiny_pair):
    """All layers offloaded: speculative greedy output equals plain decoding on the GPU."""
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    llama_cpp = pytest.importorskip("llama_cpp")
    if not llama_cpp.llama_supports_gpu_offload():
        pytest.skip("this llama-cpp-python build has no GPU offload")
    target_path, draft_path = tiny_pair
    target = LlamaCppRuntime(target_path, n_ctx=512, n_gpu_layers=999)
    draft = LlamaCppRuntime(draft_path, n_ctx=512, n_gpu_layers=999)
    # ggml-cuda builds with CUDA graphs by default: the draft then forwards a token a pass
    assert target.keeps_one_graph and draft.keeps_one_graph, "built without CUDA graphs?"
    plain = SpeculativeDecoder(target).generate(PROMPT, max_tokens=40, speculative=False)
    for k in (1, 4, 8):
        out = SpeculativeDecoder(target, [ModelDrafter(draft)], FixedPolicy("model", k)).generate(
            PROMPT, max_tokens=40
        )
        assert out.tokens == plain.tokens


class ShapeTimed:
    """A runtime on a fake clock whose passes cost what `seconds(shape)` says, a shape being
    (width, last_only): the GPU behaviours the kit measures, without a GPU."""

    n_vocab, n_ctx = 50, 512

    def __init__(self, clock) -> None:
        self.clock, self.n_past = clock, 0

    def reset(self) -> None:
        self.n_past = 0

    def rollback(self, n_past: int) -> None:
        self.n_past = n_past

    def forward(self, tokens, *, last_only=False):
        self.clock.now += self.seconds((len(tokens), last_only))
        self.n_past += len(tokens)


class FirstPassCosts(ShapeTimed):
    """Each shape's first pass takes 30 s and every later one 1 s: a CUDA graph captured per
    width on first use."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.seen: set[tuple[int, bool]] = set()

    def seconds(self, shape: tuple[int, bool]) -> float:
        cost = 1.0 if shape in self.seen else 30.0
        self.seen.add(shape)
        return cost


def test_each_widths_first_pass_is_timed_against_its_second(monkeypatch):
    clock = __import__("types").SimpleNamespace(now=0.0)
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock.now)
    runtime = FirstPassCosts(clock)
    passes = measure.first_passes(runtime, 3, last_only=False)
    assert passes == [
        {"width": n, "first_ms": 30000.0, "second_ms": 1000.0, "first_over_second": 30.0}
        for n in (1, 2, 3)
    ]
    assert runtime.n_past == 0  # reset after
    lines = measure.table([tiny_report(first_passes={"draft": passes})])
    assert "first pass / second, draft: up to 30.0x (width 1: 30000.00 against 1000.00 ms)" in lines


def tiny_report(**parts) -> dict:
    """A measure.py report with nothing measured but `parts`, for its table."""
    return {
        "label": "tiny", "backend": "onnx", "device": "cpu", "cuda_graphs": "off",
        "machine": {}, "curve_ratio": [1.0], "curve_ms": [1.0], "draft_token_ms": 0.0,
        "draft_over_target": 0.0, "plain": {"tokens_per_second": 1.0, "verify_ms_per_step": 1.0,
        "loop_us_per_step": 1.0}, "loop": {}, "oracle": [],
        "settings": {"ks": [], "acceptance": []}, "goals": {}, **parts,
    }  # fmt: skip


def test_the_kit_compares_greedy_steps_with_and_without_top_outputs(tmp_path):
    """measure.py's top_outputs: the same export's greedy decoding with each row's argmax
    read from the graph and with the logits copied to the host; the switch is put back."""
    pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime")
    from edgespec.export.onnx_export import export_onnx
    from edgespec.runtimes.onnxrt import OnnxRuntime
    from tests.tiny_hf import make_tiny_hf

    hf = make_tiny_hf(tmp_path / "hf", seed=3)
    with_top = OnnxRuntime(export_onnx(hf, tmp_path / "top", top_outputs=True), n_ctx=512)
    bench = measure.Bench(with_top, None, measure.SMOKE, 0.0)
    reference, _ = bench.plain()
    found = bench.top_outputs(reference)
    assert list(found) == [f"{way}, k={k}" for way in ("top outputs", "logits to host")
                           for k in (0, 4)]  # fmt: skip
    assert all(v["identical"] and v["tokens_per_second"] > 0 for v in found.values())
    assert with_top.top_outputs
    lines = measure.table([tiny_report(top_outputs=found)])
    assert "greedy, logits to host, k=4:" in lines and "greedy, top outputs, k=0:" in lines
    plain = OnnxRuntime(export_onnx(hf, tmp_path / "plain"), n_ctx=512)
    assert measure.Bench(plain, None, measure.SMOKE, 0.0).top_outputs(reference) is None


def test_the_kit_compares_greedy_steps_read_in_llamas_buffer_and_copied(tiny_pair):
    """On llama.cpp, top_outputs compares each row's argmax read in its logits buffer (what
    every other measurement runs) with the logits copied first; the switch is put back."""
    pytest.importorskip("llama_cpp", reason="llama.cpp back-end (edgespec[llama])")
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    target = LlamaCppRuntime(tiny_pair[0], n_ctx=512)
    bench = measure.Bench(target, None, measure.SMOKE, 0.0)
    reference, _ = bench.plain()
    found = bench.top_outputs(reference)
    assert found is not None and len(found) == 4
    assert all(v["identical"] and v["tokens_per_second"] > 0 for v in found.values())
    assert target.top_outputs


def test_the_kit_compares_sampled_steps_with_and_without_the_sampling_head(tmp_path):
    """measure.py's sampling_head: the same runtime's sampled decoding with each row read
    from the head's candidates and with the logits copied to the host. Every other measurement
    runs the runtime's default, without the head, and the runtime is left so."""
    pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime")
    from edgespec.export.onnx_export import export_onnx
    from edgespec.runtimes.onnxrt import OnnxOptions, OnnxRuntime
    from tests.tiny_hf import make_tiny_hf

    folder = export_onnx(make_tiny_hf(tmp_path / "hf", seed=3), tmp_path / "onnx")
    with_head = OnnxRuntime(folder, n_ctx=512, options=OnnxOptions(sampling_head=True))
    head = with_head.sampling_head
    bench = measure.Bench(with_head, None, measure.SMOKE, 0.0)
    assert with_head.sampling_head is None and bench.head is head
    reference, _ = bench.plain()
    found = bench.sampling_head(reference)
    assert list(found) == [
        f"{name}, {way}, k={k}"
        for name in ("temperature 0.8, top-k 40, top-p 0.9", "temperature 0.8, top-p 0.9")
        for way in ("sampling head", "logits to host")
        for k in (0, 4)
    ]
    assert all(v["tokens_per_second"] > 0 for v in found.values())
    assert with_head.sampling_head is None
    lines = measure.table([tiny_report(sampling_head=found)])
    assert "sampled, temperature 0.8, top-p 0.9, sampling head, k=4:" in lines
    plain = OnnxRuntime(folder, n_ctx=512)
    assert measure.Bench(plain, None, measure.SMOKE, 0.0).sampling_head(reference) is None


def test_the_kit_compares_steps_with_and_without_backend_sampling(tiny_pair):
    """measure.py's backend_sampling: a llama.cpp target's greedy and sampled decoding (top-k,
    top-p, temperature alone) with each row's largest logits from its backend sampler and
    with the logits copied to the host, the same output both ways. Every other measurement
    runs the runtime's default (the logits), and the runtime is left so."""
    pytest.importorskip("llama_cpp", reason="llama.cpp back-end (edgespec[llama])")
    from edgespec.runtimes.llamacpp import LlamaCppRuntime, LlamaOptions

    options = LlamaOptions(backend_sampling=True)
    target = LlamaCppRuntime(tiny_pair[0], n_ctx=512, options=options)
    bench = measure.Bench(target, None, measure.SMOKE, 0.0)
    assert not target.backend_sampling and bench.backend_sampling_on
    reference, _ = bench.plain()
    found = bench.backend_sampling(reference)
    name = "temperature 0.8, top-k 40, top-p 0.9"
    assert list(found) == [
        f"{mode}, {way}, k={k}"
        for way in ("logits to host", "backend sampling")
        for mode in ("greedy", name, "temperature 0.8, top-p 0.9", "temperature 0.8")
        for k in (0, 4)
    ]
    assert all(v["identical"] and v["tokens_per_second"] > 0 for v in found.values())
    assert not target.backend_sampling
    cuts = bench.top_k_cost(reps=3)
    assert [c["columns"] for c in cuts] == [c for c in measure.TOP_K_COLUMNS if c < target.n_vocab]
    assert cuts[0]["columns"] == 0 and len(cuts) >= 3 and all(c["ms"] > 0 for c in cuts)
    assert target.attached == 0 and target.n_past == 0
    lines = measure.table([tiny_report(backend_sampling=found, backend_top_k_ms=cuts)])
    assert f"backend sampling: {name}, backend sampling, k=4:" in lines
    assert "5-token pass by backend top-k columns (0: logits), ms: 0: " in lines
    plain = LlamaCppRuntime(tiny_pair[0], n_ctx=512)
    assert measure.Bench(plain, None, measure.SMOKE, 0.0).backend_sampling(reference) is None
    assert measure.Bench(plain, None, measure.SMOKE, 0.0).top_k_cost() is None


def test_the_kit_times_a_draft_token_with_and_without_its_confidence(tiny_pair):
    """measure.py's draft_confidence: a llama.cpp draft's one-token pass reduced to its top
    token, without and with its probability, and what the probability adds; the runtime is
    left empty."""
    pytest.importorskip("llama_cpp", reason="llama.cpp back-end (edgespec[llama])")
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    draft = LlamaCppRuntime(tiny_pair[1], n_ctx=512)
    found = measure.draft_confidence(draft, reps=4)
    assert set(found) == {"token_ms", "with_prob_ms", "confidence_ms"}
    assert found["token_ms"] > 0 and found["with_prob_ms"] > 0
    assert found["confidence_ms"] == round(found["with_prob_ms"] - found["token_ms"], 4)
    assert draft.n_past == 0
    lines = measure.table([tiny_report(draft_confidence=found)])
    assert f"draft token {found['token_ms']:.3f} ms, with its confidence " in lines


class OneGraphRebuiltOnChange(ShapeTimed):
    """One CUDA graph, as llama.cpp's CUDA back-end keeps: a pass of the shape of the one
    before takes 1 s, any other 3 s."""

    def __init__(self, clock) -> None:
        super().__init__(clock)
        self.last_shape: tuple[int, bool] | None = None

    def seconds(self, shape: tuple[int, bool]) -> float:
        cost = 1.0 if shape == self.last_shape else 3.0
        self.last_shape = shape
        return cost


def test_plain_and_verify_passes_are_timed_alternating_and_in_runs_of_their_own(monkeypatch):
    clock = __import__("types").SimpleNamespace(now=0.0)
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock.now)
    runtime = OneGraphRebuiltOnChange(clock)
    switches = measure.width_switches(runtime, (2, 5))
    assert switches == [
        {"width": n, "steady_plain_ms": 1000.0, "steady_ms": 1000.0,
         "alternating_plain_ms": 3000.0, "alternating_ms": 3000.0,
         "alternating_over_steady": 3.0}
        for n in (2, 5)
    ]  # fmt: skip
    assert runtime.n_past == 0  # reset after
    lines = measure.table([tiny_report(width_switches=switches)])
    assert (
        "plain + 5-token pass: 3000.00 + 3000.00 ms alternating, 1000.00 + 1000.00 ms each in a "
        "run of its own (3.00x)"
    ) in lines


def test_the_llama_load_check_loads_a_model_every_way_on_a_build_that_does(tiny_pair, tmp_path):
    """bench/gpu/llama_load_check.py on this CPU build: every import order loads, exit 0 (on
    the H200's CUDA build, edgespec first crashed: run.sh reads exit 3 as "llama_cpp first")."""
    pytest.importorskip("llama_cpp", reason="the llama.cpp back-end needs llama-cpp-python")
    script = Path(__file__).parent.parent / "bench" / "gpu" / "llama_load_check.py"
    out = tmp_path / "check.json"
    done = subprocess.run(
        [sys.executable, str(script), str(tiny_pair[1]), "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(out.read_text())
    variants = record["variants"]
    assert len(variants) == 9 and all(v["loaded"] for v in variants.values()), variants
    assert "CPU : " in record["system_info"] and "AMX_INT8" not in record["system_info"]
    assert "edgespec first                             loaded" in done.stdout


STAND_IN_PYTHON = """#!/usr/bin/env bash
echo "${CUDA_LAUNCH_BLOCKING:+CUDA_LAUNCH_BLOCKING=$CUDA_LAUNCH_BLOCKING }$*" >> "$CALLS"
case "$*" in
  *llama_load_check.py*) exit "$LOAD_CHECK_EXIT" ;;
  *llama_supports_gpu_offload*) exit "${PREBUILT_EXIT:-0}" ;;
  *--report*) echo table ;;
  *verify_ops.py*) echo '{}' > "${@: -1}"; echo "operator table" ;;
  *--json*) echo '{}' > "${@: -1}" ;;
esac
"""


def run_kit_steps(tmp_path: Path, steps: str, marks: tuple[str, ...], **env: str):
    """run.sh sourced with a stand-in Python that logs each launch; `marks` left in its state.
    Returns the finished process and the launches, one line each."""
    kit, out = tmp_path / "kit", tmp_path / "out"
    (kit / "state").mkdir(parents=True, exist_ok=True)
    for mark in marks:
        (kit / "state" / mark).touch()
    python = tmp_path / "python"
    python.write_text(STAND_IN_PYTHON)
    python.chmod(0o755)
    calls = tmp_path / "calls"
    script = Path(__file__).parent.parent / "bench" / "gpu" / "run.sh"
    sourced = f"set -euo pipefail; source {script} --kit {kit} --out {out} --no-7b; PY={python}; "
    done = subprocess.run(
        ["bash", "-c", sourced + steps],
        capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "CALLS": str(calls), **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done, calls.read_text().splitlines() if calls.exists() else []


@pytest.mark.parametrize("load_check_exit", [0, 3])
def test_the_kit_measures_newest_questions_first_and_loads_llama_cpp_as_the_check_says(
    tmp_path, load_check_exit
):
    """run.sh's GPU steps (sourced, with a stand-in Python and the exports marked done):
    llama.cpp (graphs on, full), the fp16 ONNX target, the INT4 one, quick, then llama.cpp
    with graphs off (quick), the table rewritten after each; where the load check exits 3,
    measure.py runs with llama_cpp imported first."""
    kit, out = tmp_path / "kit", tmp_path / "out"
    marks = ("background", "bundle-demo-gguf", "bundle-demo-onnx", "bundle-demo-onnx-fp16")
    (kit / "work" / "bundles" / "demo-gguf").mkdir(parents=True)
    (kit / "work" / "bundles" / "demo-gguf" / "draft.q8_0.gguf").touch()
    _, launched = run_kit_steps(
        tmp_path, "measure_all", marks, LOAD_CHECK_EXIT=str(load_check_exit)
    )
    llama_first = (
        "-c import llama_cpp, runpy, sys; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__') "
        if load_check_exit == 3
        else ""
    )
    bundles = kit / "work" / "bundles"
    measure = "bench/gpu/measure.py --device cuda --backend"
    done = []

    def report(name: str) -> str:
        done.append(f"{out}/demo-{name}.json")
        return "bench/gpu/measure.py --report " + " ".join(sorted(done))

    assert launched == [
        f"bench/gpu/llama_load_check.py {bundles}/demo-gguf/draft.q8_0.gguf "
        f"--json {out}/llama-load-check.json",
        f"{llama_first}{measure} llama --graphs on --grid full --bundle {bundles}/demo-gguf "
        f"--label demo --json {out}/demo-llama-graphs-on.json",
        report("llama-graphs-on"),
        f"{measure} onnx --graphs on --grid full --bundle {bundles}/demo-onnx-fp16 "
        f"--label demo-fp16 --json {out}/demo-fp16-onnx-graphs-on.json",
        report("fp16-onnx-graphs-on"),
        f"{measure} onnx --graphs on --grid quick --bundle {bundles}/demo-onnx "
        f"--label demo --json {out}/demo-onnx-graphs-on.json",
        report("onnx-graphs-on"),
        f"{llama_first}{measure} llama --graphs off --grid quick --bundle {bundles}/demo-gguf "
        f"--label demo --json {out}/demo-llama-graphs-off.json",
        report("llama-graphs-off"),
    ]


@pytest.mark.parametrize("exported", [True, False])
def test_the_kit_times_the_int4_targets_operators_with_every_launch_waited_for(tmp_path, exported):
    kit, out = tmp_path / "kit", tmp_path / "out"
    marks = ("bundle-demo-onnx",) if exported else ("failed-bundle-demo-onnx",)
    done, launched = run_kit_steps(tmp_path, "operator_times; operator_times", marks)
    target = kit / "work" / "bundles" / "demo-onnx" / "target.int4"
    assert launched == (
        [f"CUDA_LAUNCH_BLOCKING=1 bench/gpu/verify_ops.py {target} --device cuda "
         f"--widths 1,2,5,9 --rounds 5 --json {out}/verify-ops-cuda.json"]
        if exported
        else []
    )  # fmt: skip
    if exported:  # its table goes after the measures'
        assert (out / "table.txt").read_text() == "operator table\n" == done.stdout


def test_operator_times_run_only_when_asked(tmp_path):
    """run.sh --verify-ops (or VERIFY_OPS=1) runs operator_times after the measures."""
    script = REPO / "bench" / "gpu" / "run.sh"
    for args, env, asked in (
        ("", {}, "0"),
        ("--verify-ops", {}, "1"),
        ("", {"VERIFY_OPS": "1"}, "1"),
    ):
        done = subprocess.run(
            ["bash", "-c", f"source {script} --kit {tmp_path}/kit {args}; echo $VERIFY_OPS"],
            capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", **env},
        )  # fmt: skip
        assert done.stdout.strip() == asked, done.stderr


PREBUILT = "llama_cpp_python-0.3.36-cuda.tar.xz"


def carry_prebuilt_llama(kit: Path, arch: str, damaged: bool = False) -> None:
    """What prepare.sh leaves for a prebuilt llama-cpp-python of sm_`arch`: the package as
    prebuild_llama.sh packs it (a library under two names, one a link; its dist-info),
    xz-compressed, in two parts in two uploads, listed in MANIFEST.sha256, the whole in
    LLAMA.sha256."""
    import hashlib
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        files = {
            "llama_cpp/__init__.py": b"# stand-in\n",
            "llama_cpp/lib/libllama.so.0.5.0": b"\x7fELF" + bytes(2000),
            "llama_cpp_python-0.3.36.dist-info/METADATA": b"Name: x\n",
        }
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("llama_cpp/lib/libllama.so.0")
        link.type, link.linkname = tarfile.SYMTYPE, "libllama.so.0.5.0"
        tar.addfile(link)
    package = buffer.getvalue()
    joined = f"llama-cuda-sm{arch}--{PREBUILT}"
    half = len(package) // 2
    parts = {f"up2/{joined}.part00": package[:half], f"up3/{joined}.part01": package[half:]}
    (kit / "up1").mkdir(parents=True)
    (kit / "up1" / "llama_cpp_python-0.3.36-trimmed.tar.gz").write_bytes(b"source")
    for path, data in parts.items():
        (kit / path).parent.mkdir(exist_ok=True)
        (kit / path).write_bytes(data + (b"!" if damaged and path.startswith("up3") else b""))
    (kit / "up1" / "MANIFEST.sha256").write_text(
        "".join(f"{hashlib.sha256(d).hexdigest()}  {p}\n" for p, d in parts.items())
    )
    sums = f"{hashlib.sha256(package).hexdigest()}  {joined}\n"
    (kit / "up1" / "LLAMA.sha256").write_text(sums)


def fake_nvidia_smi(tmp_path: Path, compute_cap: str) -> str:
    """A PATH whose nvidia-smi answers the compute-capability query as a GPU would."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\necho {compute_cap}\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


@pytest.mark.parametrize("compute_cap, listed", [("9.0", True), ("8.9", False)])
def test_a_prebuilt_llama_cpp_is_used_only_on_the_gpu_it_was_built_for(
    tmp_path, compute_cap, listed
):
    carry_prebuilt_llama(tmp_path / "kit", "90")
    done, _ = run_kit_steps(
        tmp_path, "prebuilt_llama_listed && echo listed || echo not listed", (),
        PATH=fake_nvidia_smi(tmp_path, compute_cap),
    )  # fmt: skip
    assert done.stdout == ("listed\n" if listed else "not listed\n")


@pytest.mark.parametrize("compute_cap, carried", [("9.0", "whole"), ("9.0", "in part"),
                                                   ("8.9", "whole")])  # fmt: skip
def test_the_background_builds_llama_cpp_only_where_no_prebuilt_fits_the_gpu(
    tmp_path, compute_cap, carried
):
    """The first call's background steps: the models and exports either way; a prebuilt
    llama-cpp-python for this GPU installed at once where its parts are all here, left for
    the main run where some are still to come, and the source built only where the uploads
    carry none for this GPU."""
    kit = tmp_path / "kit"
    carry_prebuilt_llama(kit, "90")
    if carried == "in part":
        for part in (kit / "up3").iterdir():
            part.unlink()
    _, launched = run_kit_steps(
        tmp_path, "WAIT_MIN=0; background_steps", (), PATH=fake_nvidia_smi(tmp_path, compute_cap)
    )
    builds = [c for c in launched if c.endswith("llama_cpp_python-0.3.36-trimmed.tar.gz")]
    installs = [c for c in launched if "llama_supports_gpu_offload" in c]
    exports = [c for c in launched if c.startswith("-m edgespec export --format onnx")]
    expected = {("9.0", "whole"): (0, 1), ("9.0", "in part"): (0, 0), ("8.9", "whole"): (1, 0)}
    assert (len(builds), len(installs)) == expected[compute_cap, carried]
    assert len(exports) == 2  # INT4 and fp16 targets


def test_the_main_run_leaves_llama_cpp_to_the_background_where_no_prebuilt_fits(tmp_path):
    """On a GPU of another architecture the first call's background builds from source; the
    main run's llama_from_uploads must not start a second build."""
    carry_prebuilt_llama(tmp_path / "kit", "90")
    _, launched = run_kit_steps(
        tmp_path, "llama_from_uploads; wait", (), PATH=fake_nvidia_smi(tmp_path, "8.9")
    )
    assert launched == []


def test_a_prebuilt_tried_once_is_not_tried_again(tmp_path):
    """The first call's background and the main run may both find the parts here: the one
    that comes second does nothing (the first installed it, or is building instead)."""
    carry_prebuilt_llama(tmp_path / "kit", "90")
    _, launched = run_kit_steps(
        tmp_path, "llama_from_uploads; wait", ("llama-prebuilt-tried",),
        PATH=fake_nvidia_smi(tmp_path, "9.0"),
    )  # fmt: skip
    assert launched == []


@pytest.mark.parametrize("outcome", ["loads", "does not load", "damaged"])
def test_the_kit_installs_the_prebuilt_llama_cpp_and_builds_where_it_fails(tmp_path, outcome):
    """llama_from_uploads on an sm_90 GPU whose uploads carry a prebuilt for it: the parts
    joined in order and checked, unpacked into the kit's site (links as links), then asked
    whether their GPU back-end loads; a prebuilt that does not load is removed and the source
    built instead (in the background), as is a damaged one, which is never unpacked. Nothing
    happens twice."""
    kit = tmp_path / "kit"
    carry_prebuilt_llama(kit, "90", damaged=outcome == "damaged")
    site = kit / "site"
    (site / "llama_cpp").mkdir(parents=True)  # what an earlier, failed unpacking would leave
    done, launched = run_kit_steps(
        tmp_path, "llama_from_uploads; wait; llama_from_uploads; wait", (),
        PATH=fake_nvidia_smi(tmp_path, "9.0"), PREBUILT_EXIT="0" if outcome == "loads" else "4",
    )  # fmt: skip
    check = "-c import sys, llama_cpp; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 4)"
    build = (
        "-m pip install --no-index --no-deps --no-build-isolation --no-compile --upgrade --target "
        f"{site} {kit}/up1/llama_cpp_python-0.3.36-trimmed.tar.gz"
    )
    unpacked = site / "llama_cpp" / "lib" / "libllama.so.0"
    if outcome == "loads":
        assert launched == [check]  # the joined parts matched LLAMA.sha256
        assert unpacked.is_symlink() and unpacked.read_bytes().startswith(b"\x7fELF")
        assert (site / "llama_cpp_python-0.3.36.dist-info" / "METADATA").exists()
    elif outcome == "does not load":
        assert launched == [check, build]
        assert not (site / "llama_cpp").exists()
        assert not (site / "llama_cpp_python-0.3.36.dist-info").exists()
        assert "the prebuilt llama-cpp-python does not load here" in done.stderr
    else:
        assert launched == [build]
        assert not unpacked.exists()
    assert not list((kit / "work").glob("**/*.tar.xz*"))  # joined, then removed
    assert (kit / "state" / "llama").exists()


# --- bench/gpu/prebuild_llama.sh: the package it makes and its check ------------------------


def fake_cuda_wheel(tmp_path: Path) -> Path:
    """A wheel shaped as llama-cpp-python's CUDA build: its package loads libggml-cuda.so with
    ctypes (as llama_cpp does), a library that calls the driver's cuMemCreate but, linked
    against a stub with no symbols, does not name libcuda.so.1; the wheel's copies of it
    under its other names are plain files."""
    import base64
    import hashlib
    import zipfile

    source = tmp_path / "ggml_cuda.c"
    source.write_text(
        "int cuMemCreate(void);\nint ggml_cuda_probe(void) { return cuMemCreate(); }\n"
    )
    built = tmp_path / "libggml-cuda.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", built, source], check=True)
    init = (
        "import ctypes, pathlib\n__version__ = '0.3.36'\n"
        "ctypes.CDLL(str(pathlib.Path(__file__).parent / 'lib' / 'libggml-cuda.so'))\n"
    )
    info = "llama_cpp_python-0.3.36.dist-info"
    files = {
        "llama_cpp/__init__.py": init.encode(),
        **{f"llama_cpp/lib/{n}": built.read_bytes() for n in
           ("libggml-cuda.so", "libggml-cuda.so.0", "libggml-cuda.so.0.9.4")},
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.3.36\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
    }  # fmt: skip

    def digest(data: bytes) -> str:
        raw = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        return "sha256=" + raw.decode()

    record = "".join(f"{n},{digest(d)},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    wheel = tmp_path / "llama_cpp_python-0.3.36-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in {**files, f"{info}/RECORD": record.encode()}.items():
            z.writestr(name, data)
    return wheel


def package_and_check(tmp_path: Path, wheel: Path, patch_driver: bool = True):
    """prebuild_llama.sh's package_wheel and check_package, sourced, on this wheel."""
    work = tmp_path / "work"
    (work / "cuda" / "lib").mkdir(parents=True)
    tarball = tmp_path / "out" / "llama.tar.xz"
    script = (
        f"source {REPO}/bench/gpu/prebuild_llama.sh\n"
        + ("" if patch_driver else "needs_driver() { :; }\n")
        + f"package_wheel {wheel} {tarball}\ncheck_package {tarball}\n"
    )
    env = {"WORK": str(work), "PY": sys.executable, "TARGET": str(work / "cuda"), "PATH":
           f"{Path(sys.executable).parent}:/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    return done, tarball


def test_the_prebuilt_package_keeps_links_as_links_and_names_the_driver(tmp_path):
    import tarfile

    done, tarball = package_and_check(tmp_path, fake_cuda_wheel(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "llama_cpp 0.3.36 imports with its CUDA back-end\n"
    with tarfile.open(tarball) as tar:
        lib = {m.name.removeprefix("llama_cpp/lib/"): m for m in tar if "/lib/" in m.name}
        assert {name: m.linkname for name, m in lib.items() if m.issym()} == {
            "libggml-cuda.so": "libggml-cuda.so.0.9.4",
            "libggml-cuda.so.0": "libggml-cuda.so.0.9.4",
        }
        assert lib["libggml-cuda.so.0.9.4"].isfile()
        tar.extract(lib["libggml-cuda.so.0.9.4"], tmp_path / "x")
    needed = subprocess.run(
        ["readelf", "-d", tmp_path / "x/llama_cpp/lib/libggml-cuda.so.0.9.4"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "Shared library: [libcuda.so.1]" in needed


def test_the_package_check_refuses_a_library_that_does_not_name_the_driver(tmp_path):
    done, _ = package_and_check(tmp_path, fake_cuda_wheel(tmp_path), patch_driver=False)
    assert done.returncode != 0
    assert "libggml-cuda.so: undefined symbol: cuMemCreate" in done.stderr


def test_prebuild_without_nvcc_says_what_it_needs(tmp_path):
    missing = tmp_path / "nvcc"
    done = subprocess.run(
        ["bash", REPO / "bench/gpu/prebuild_llama.sh", "--out", tmp_path / "kit"],
        env={"NVCC": str(missing), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 3
    assert done.stderr == (
        "prebuild_llama.sh: needs nvcc from CUDA 13 (the GPU machine's); found none at "
        f"{missing} (set NVCC=...)\n"
    )
    assert not (tmp_path / "kit").exists()  # nothing fetched or made


def test_verify_ops_times_each_width_by_operator(tmp_path):
    """bench/gpu/verify_ops.py on a tiny INT4 export: every width timed in rounds, its
    operators attributed to it."""
    pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    bench = load_bench_script("gpu/verify_ops.py", "gpu_verify_ops")
    model = export_onnx(
        make_tiny_hf(tmp_path / "hf", arch="qwen2"), tmp_path / "onnx", quant="int4"
    )
    runtime = bench.profiled_runtime(model, 1, str(tmp_path / "prof"))
    order = bench.run_rounds(runtime, [1, 3], rounds=2)
    assert order == [1, 3] * 3
    events = json.loads(open(runtime.session.end_profiling()).read())
    result = bench.by_width(events, order, skip=2)
    assert set(result) == {1, 3}
    assert all(r["ms"] > 0 and r["ops_ms"]["MatMulNBits"] > 0 for r in result.values())
    assert "| t(n)/t(1) | 1.000 |" in bench.table(result, [1, 3])


# --- bench/gpu/make_gguf.py: random weights written straight into quantized GGUF blocks -------


def test_the_direct_gguf_writer_makes_a_pair_llama_cpp_loads_with_llama_cpps_block_types(
    tmp_path,
):
    """make_gguf.py --pair tiny: a bundle whose target has Q4_K_M's type mix (Q6_K for the
    output and for attn_v / ffn_down in use_more_bits' layers), whose draft is Q8_0, whose
    blocks dequantize to the spread make_models.py gives each weight, and which llama.cpp
    loads and forwards."""
    pytest.importorskip("llama_cpp", reason="the llama.cpp back-end needs llama-cpp-python")
    import gguf

    from edgespec.bundle import read_bundle
    from edgespec.runtimes.llamacpp import LlamaCppRuntime

    bench = load_bench_script("gpu/make_gguf.py", "gpu_make_gguf")
    folder = bench.write_pair("tiny", tmp_path / "b", None)
    bundle = read_bundle(folder)
    for role, shape, quant in (("target", "tiny", "q4_k_m"), ("draft", "tiny-draft", "q8_0")):
        path = bundle.path(role)
        reader = gguf.GGUFReader(path)
        found = {t.name: t for t in reader.tensors}
        n_vocab = found["token_embd.weight"].shape[1]
        plan = bench.tensor_plan(bench.SHAPES[shape], int(n_vocab), quant)
        assert list(found) == [name for name, *_ in plan]
        for name, dims, kind, std in plan:
            tensor = found[name]
            assert tensor.tensor_type.name == kind, name
            assert [int(x) for x in tensor.shape] == list(reversed(dims)), name  # ne order
            if kind != "F32":
                weights = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
                assert abs(float(weights.std()) / std - 1) < 0.1, name
                assert abs(float(weights.mean())) < 0.1 * std, name
        if quant == "q4_k_m":
            six = {n for n, t in found.items() if t.tensor_type.name == "Q6_K"}
            # 2 layers: use_more_bits picks layer 1 (>= 7 * 2 // 8), not layer 0
            assert six == {"token_embd.weight", "output.weight", "blk.1.attn_v.weight",
                           "blk.1.ffn_down.weight"}  # fmt: skip
            # the untied output holds the embedding's values: a clear top logit (the 7B's
            # random output layer had near ties that CUDA's batched kernels flipped)
            assert np.array_equal(found["output.weight"].data, found["token_embd.weight"].data)
        runtime = LlamaCppRuntime(path, n_ctx=128)
        logits = runtime.forward([5, 9, 14, 3, 7])
        assert logits.shape == (5, runtime.n_vocab) and np.isfinite(logits).all()
        top2 = np.sort(logits, axis=1)[:, -2:]
        assert (top2[:, 1] > top2[:, 0]).all()  # a clear top token: no ties
    assert bundle.model("target").vocab_hash == bundle.model("draft").vocab_hash


def test_q4_k_m_gives_q6_k_to_the_layers_llama_cpp_does():
    bench = load_bench_script("gpu/make_gguf.py", "gpu_make_gguf")
    plan = bench.tensor_plan(bench.SHAPES["qwen2.5-7b"], 152_064, "q4_k_m")
    six = sorted(int(n.split(".")[1]) for n, _, kind, _ in plan
                 if kind == "Q6_K" and n.endswith("attn_v.weight"))  # fmt: skip
    # 28 layers: the first 3, the last 4, and every third from layer 5
    assert six == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27]
    kinds = {n: kind for n, _, kind, _ in plan}
    assert kinds["token_embd.weight"] == "Q6_K" and kinds["output.weight"] == "Q6_K"
    embd = next(dims for n, dims, *_ in plan if n == "token_embd.weight")
    assert embd == (152_064, 3584)
    draft = bench.tensor_plan(bench.SHAPES["qwen2.5-0.5b"], 151_936, "q8_0")
    assert {kind for _, _, kind, _ in draft} == {"Q8_0", "F32"}
    assert "output.weight" not in {n for n, *_ in draft}  # tied


def test_the_head_writer_makes_an_eagle3_head_that_drafts_beside_its_target(tmp_path):
    """make_gguf.py --pair tiny --head: an f16 EAGLE-3 head in the layout export/eagle3_gguf.py
    owns (half the toy vocabulary as draft rows, d2t mapping them), beside a target written as
    a Llama (qwen2 keeps no layer inputs in this llama.cpp), which llama.cpp opens and drafts
    from: finite logits on exactly the d2t rows, tokens among them."""
    pytest.importorskip("llama_cpp", reason="the llama.cpp back-end needs llama-cpp-python")
    import gguf

    from edgespec.bundle import read_bundle
    from edgespec.drafters.head import HeadDrafter
    from edgespec.export.eagle3_gguf import tensor_plan
    from edgespec.runtimes.llamacpp import LlamaCppRuntime
    from edgespec.sampling import SamplingParams

    bench = load_bench_script("gpu/make_gguf.py", "gpu_make_gguf")
    folder = bench.write_pair("tiny", tmp_path / "b", None, head=True)
    target_path = read_bundle(folder).path("target")
    assert gguf.GGUFReader(target_path).fields["general.architecture"].contents() == "llama"
    reader = gguf.GGUFReader(folder / bench.HEAD_FILE)
    assert reader.fields["general.architecture"].contents() == "eagle3"
    assert reader.fields["eagle3.target_layers"].contents() == [0, 1, 1]
    found = {t.name: t for t in reader.tensors}
    target = LlamaCppRuntime(target_path, n_ctx=128)
    shape = bench.head_shape("tiny", target.n_vocab)
    assert shape.n_draft_vocab == target.n_vocab // 2
    for name, dims, std in tensor_plan(shape):
        assert found[name].tensor_type.name == ("F32" if std == 0.0 else "F16"), name
        assert [int(x) for x in found[name].shape] == list(reversed(dims)), name
    assert np.array_equal(found["d2t"].data, np.arange(shape.n_draft_vocab))
    head = target.open_head(str(folder / bench.HEAD_FILE))
    context = [5, 9, 14, 3, 7, 11, 2, 8]
    target.forward(context[:-1], last_only=True)
    logits, _ = head.decode(context[1:], head.encode(target.features(0, len(context) - 1)))
    assert np.isfinite(logits).sum() == shape.n_draft_vocab
    assert np.isfinite(logits[: shape.n_draft_vocab]).all()
    tokens = HeadDrafter(target, head).propose(context, 8, SamplingParams()).tokens
    assert len(tokens) == 8 and (tokens < shape.n_draft_vocab).all()


def test_the_7b_head_has_a_published_heads_shape():
    """One decoder layer at Qwen2.5-7B's widths, llama.cpp's default extract layers, 32,000
    draft rows: 402,784,256 f16 weights (0.81 GB)."""
    from edgespec.export.eagle3_gguf import tensor_plan

    bench = load_bench_script("gpu/make_gguf.py", "gpu_make_gguf")
    shape = bench.head_shape("qwen2.5-7b", 152_064)
    assert shape.layers == (2, 14, 25) and shape.n_draft_vocab == 32_000
    dims = {name: d for name, d, _ in tensor_plan(shape)}
    assert dims["fc.weight"] == (3584, 3 * 3584)
    assert dims["blk.0.attn_q.weight"] == (3584, 2 * 3584)
    assert dims["blk.0.attn_k.weight"] == (512, 2 * 3584)
    assert dims["blk.0.ffn_up.weight"] == (18_944, 3584)
    assert dims["output.weight"] == (32_000, 3584)
    assert sum(int(np.prod(d)) for d in dims.values() if len(d) == 2) == 402_784_256


@pytest.mark.slow
def test_the_kit_smoke_run_of_the_7b_mode_writes_gguf_directly_and_measures_the_full_grid(
    tmp_path,
):
    """run.sh --smoke --pairs 7b --backends llama: the 7B mode's path on a tiny pair."""
    out = smoke_run(tmp_path, "--pairs", "7b", "--backends", "llama")
    report = json.loads((out / "tiny-direct-llama.json").read_text())
    assert report["backend"] == "llama" and len(report["curve_ms"]) == 5
    assert any(o["k"] == "auto" and o["draft_cost"] == "real" for o in report["oracle"])
    assert all(o["identical"] for o in report["oracle"])
    # the tiny pair's EAGLE-3 head, timed at k = 1..8: its drafted token against t(1)
    head = report["head"]
    assert head["file"] == "head.eagle3.gguf" and head["layers"] == [0, 1, 1]
    assert len(head["propose_ms_by_k"]) == 8 and 0 < head["token_ms"] == report["head_token_ms"]
    assert report["head_over_target"] == round(head["token_ms"] / report["curve_ms"][0], 4)
    assert "head_token_at_most_0.1_of_target" in report["goals"]
    table = (out / "table.txt").read_text()
    assert "## tiny-direct on llama" in table and "EAGLE-3 head (head.eagle3.gguf" in table


def test_the_7b_mode_makes_and_measures_the_7b_pair_first_on_llama_cpp_alone(tmp_path):
    """run.sh --pairs 7b,demo --backends llama, sourced: the GGUF pairs written directly
    (7B first), no HF checkpoint or ONNX export; then 7B graphs on (full grid), the demo
    pair on (full), the demo pair off (quick), the table rewritten after each."""
    kit, out = tmp_path / "kit", tmp_path / "out"
    for pair in ("7b", "demo"):
        (kit / "work" / "bundles" / f"{pair}-gguf").mkdir(parents=True)
    (kit / "work" / "bundles" / "7b-gguf" / "draft.q8_0.gguf").touch()
    _, launched = run_kit_steps(
        tmp_path, "PAIRS=7b,demo; BACKENDS=llama; models_and_exports; touch $KIT/state/background;"
        " measure_all", ("llama",), LOAD_CHECK_EXIT="0",
    )  # fmt: skip
    bundles = kit / "work" / "bundles"
    tok = kit / "up1" / "qwen2.5-tokenizer"
    measure = "bench/gpu/measure.py --device cuda --backend llama"
    made = [c for c in launched if "make_gguf.py" in c]
    assert made == [f"bench/gpu/make_gguf.py --pair {p} --head --tokenizer {tok} --out "
                    f"{bundles}/{p}-gguf" for p in ("7b", "demo")]  # fmt: skip
    assert not [c for c in launched if "make_models.py" in c or "edgespec export" in c]
    measures = [c for c in launched if c.startswith(measure)]
    assert measures == [
        f"{measure} --graphs on --grid full --bundle {bundles}/7b-gguf --label 7b "
        f"--json {out}/7b-llama-graphs-on.json",
        f"{measure} --graphs on --grid full --bundle {bundles}/demo-gguf --label demo "
        f"--json {out}/demo-llama-graphs-on.json",
        f"{measure} --graphs off --grid quick --bundle {bundles}/demo-gguf --label demo "
        f"--json {out}/demo-llama-graphs-off.json",
    ]
    reports = [c for c in launched if "--report" in c]
    assert len(reports) == 3  # after each measure


def test_the_q35_pair_makes_a_hybrid_target_and_times_its_mtp_layer_and_curve(tmp_path):
    """run.sh --pairs q35 --backends llama, sourced: the Qwen3.5-2B-like target made by
    bench/hybrid_gguf.py (no draft, no HF checkpoint), then its MTP layer timed
    (head_cost.py) and its verify curve (edgespec tune), both on CUDA."""
    kit, out = tmp_path / "kit", tmp_path / "out"
    _, launched = run_kit_steps(
        tmp_path, "PAIRS=q35; BACKENDS=llama; models_and_exports; touch $KIT/state/background;"
        " measure_all", ("llama",),
    )  # fmt: skip
    target = kit / "work" / "bundles" / "q35-gguf" / "target.gguf"
    assert launched == [
        f"bench/hybrid_gguf.py --shape qwen3.5-2b --quant q4_k_m --out {target}",
        f"bench/head_cost.py {target} --device cuda --reps 20 --json {out}/q35-mtp-cuda.json",
        f"-m edgespec tune --target {target} --device cuda --n-max 17 --n-ctx 1024",
    ]


def test_the_kit_smoke_run_of_the_q35_pair_times_a_tiny_hybrids_mtp_layer(tmp_path):
    """run.sh --smoke --pairs q35 --backends llama: the tiny hybrid shape's MTP layer timed."""
    out = smoke_run(tmp_path, "--pairs", "q35", "--backends", "llama")
    report = json.loads((out / "q35-mtp.json").read_text())
    assert (report["kind"], report["layers"], len(report["propose_ms_by_k"])) == ("mtp", [], 8)


def smoke_run(tmp_path: Path, *args: str) -> Path:
    """bench/gpu/run.sh --smoke ARGS on the CPU (llama.cpp back-end); its results folder."""
    pytest.importorskip("llama_cpp", reason="the llama.cpp back-end needs llama-cpp-python")
    out = tmp_path / "results"
    proc = subprocess.run(
        ["bash", "bench/gpu/run.sh", "--smoke", *args, "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out
