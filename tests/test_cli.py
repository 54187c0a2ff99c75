"""The command line: bad input prints one line naming the problem and exits 2."""

import json
import subprocess
import sys

import pytest

from edgespec.app.cli import main
from edgespec.errors import EdgespecError


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("edgespec: error: ")
    return lines[0].removeprefix("edgespec: error: ")


def test_missing_model_file(capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", "--target", str(tmp_path / "nope.gguf"), "--prompt", "hi")
    assert code == 2
    assert one_error_line(err) == f"model file not found: {tmp_path / 'nope.gguf'}; check the path"


def test_not_a_gguf_file(capsys, tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 this is a zip, not a model")
    code, _, err = run_cli(capsys, "run", "--target", str(bad), "--prompt", "hi")
    assert code == 2
    assert one_error_line(err) == (
        f"{bad} is not a GGUF file (starts with b'PK\\x03\\x04', expected b'GGUF'); "
        "convert it with `edgespec export` or download the .gguf file again"
    )


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--temperature", "-0.5", "temperature must be in [0.0, inf], got -0.5"),
        ("--top-p", "1.5", "top_p must be in (0.0, 1.0], got 1.5"),
        ("--top-k", "-1", "top_k must be a whole number >= 0, got -1"),
        ("--k", "many", "--k must be a whole number or 'auto', got 'many'"),
    ],
)
def test_invalid_sampling_values_fail_before_loading(capsys, tmp_path, flag, value, message):
    code, _, err = run_cli(
        capsys, "run", "--target", str(tmp_path / "absent.gguf"), "--prompt", "hi", flag, value
    )
    assert code == 2
    assert one_error_line(err).startswith(message)


def test_unreadable_prompt_file(capsys, tmp_path):
    code, _, err = run_cli(
        capsys, "run", "--target", "x.gguf", "--prompt-file", str(tmp_path / "missing.txt")
    )
    assert code == 2
    assert one_error_line(err) == (
        f"cannot read --prompt-file {tmp_path / 'missing.txt'}: No such file or directory"
    )


def test_console_script_exits_2_without_traceback(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgespec.app.cli",
            "run",
            "--target",
            str(tmp_path / "x.gguf"),
            "--prompt",
            "hi",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        == f"edgespec: error: model file not found: {tmp_path / 'x.gguf'}; check the path"
    )


def check_run_json(capsys, target_path, draft_path, target) -> None:
    """`run --json` prints what the pair decodes: its text is its tokens' text, and its tokens
    are plain greedy decoding's up to a near-tie (llama.cpp on CPU is not batch-invariant)."""
    from edgespec.app.bench_runs import NEAR_TIE, first_departure, top2_gap
    from edgespec.engine import SpeculativeDecoder

    prompt = "def add(a, b):"
    argv = ["--prompt", prompt, "--max-tokens", "12", "--json", "--n-ctx", "512"]
    code, out, _ = run_cli(
        capsys, "run", "--target", str(target_path), "--draft", str(draft_path), *argv
    )
    assert code == 0
    result = json.loads(out)
    ref = SpeculativeDecoder(target).generate(prompt, max_tokens=12, speculative=False)
    i = first_departure(ref.tokens, result["tokens"])
    if i is None:
        assert (result["tokens"], result["finish_reason"]) == (ref.tokens, ref.finish_reason)
    else:
        context = target.tokenize(prompt, special=True) + ref.tokens[:i]
        assert top2_gap(target, context) < NEAR_TIE, f"departure at {i} is not a near-tie"
    assert result["text"] == target.detokenize(result["tokens"]).decode("utf-8", "replace")
    assert result["finish_reason"] == ("length" if len(result["tokens"]) == 12 else "stop")
    assert result["stats"]["n_generated"] == len(result["tokens"])
    assert {"acceptance_rate", "mean_acceptance_length", "t_loop_s"} <= set(result["stats"])


@pytest.mark.real
def test_run_json_with_the_real_pair(capsys, demo_runtimes, demo_target_path, demo_draft_path):
    check_run_json(capsys, demo_target_path, demo_draft_path, demo_runtimes[0])


def test_run_json_with_a_tiny_pair(capsys, tiny_pair, tiny_runtimes):
    check_run_json(capsys, *tiny_pair, tiny_runtimes[0])


@pytest.mark.real
def test_prompt_longer_than_context(capsys, demo_target_path):
    code, _, err = run_cli(
        capsys,
        "run",
        "--target",
        str(demo_target_path),
        "--prompt",
        " ".join(["word"] * 600),
        "--n-ctx",
        "256",
        "--drafter",
        "none",
    )
    assert code == 2
    assert one_error_line(err) == (
        "the prompt is 600 tokens but the context holds 256; shorten the prompt or raise "
        "the context size (--n-ctx)"
    )


@pytest.mark.real
def test_truncated_gguf(capsys, tmp_path, demo_draft_path):
    cut = tmp_path / "cut.gguf"
    with demo_draft_path.open("rb") as src:
        cut.write_bytes(src.read(4 << 20))
    code, _, err = run_cli(capsys, "run", "--target", str(cut), "--prompt", "hi")
    assert code == 2
    line = one_error_line(err)
    assert line.startswith(f"cannot load {cut}: ")
    assert line.endswith(
        "the file may be truncated or corrupt (compare its size and sha256 "
        "with the source, or export it again)"
    )


def test_doctor_says_why_cuda_graphs_are_off(capsys):
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("onnxruntime-gpu is installed: the CPU-build message does not apply")
    assert main(["doctor"]) == 0
    lines = {line[:24].strip(): line[25:] for line in capsys.readouterr().out.splitlines()}
    assert lines["onnxruntime providers"] == ", ".join(ort.get_available_providers())
    assert lines["onnxruntime threads"] == "a pool per model, its idle workers asleep after 50 us"
    assert lines["CUDA graphs"] == (
        f"inactive: onnxruntime {ort.__version__} has no CUDA execution provider (the CPU "
        "build); install onnxruntime-gpu: pip install 'edgespec[onnx-gpu]'"
    )


def test_doctor_says_whether_llama_cpp_can_cut_rows_where_they_are():
    from types import SimpleNamespace

    from edgespec.app.doctor import backend_sampling_status

    assert backend_sampling_status(SimpleNamespace(__version__="0.3.16")) == (
        "no: llama-cpp-python 0.3.16 has no backend sampling (llama_set_sampler, 0.3.36 and later)"
    )
    able = SimpleNamespace(__version__="0.3.36", llama_set_sampler=None)
    assert backend_sampling_status(able) == (
        "with --backend-sampling: each row's largest logits only (greedy, top-k, top-p, "
        "min-p, temperature alone); off by default, not yet timed on a GPU"
    )


def test_doctor_says_whether_llama_cpp_offloads_and_keeps_one_graph(monkeypatch):
    from types import SimpleNamespace

    from edgespec.app.doctor import llama_gpu_status

    def build(gpu: bool, info: bytes):
        return SimpleNamespace(
            llama_supports_gpu_offload=lambda: gpu,
            llama_print_system_info=lambda: info,
            __version__="0.3.36",
        )

    cuda = b"CUDA : ARCHS = 870 | USE_GRAPHS = 1 | CPU : NEON = 1 | "
    monkeypatch.delenv("GGML_CUDA_DISABLE_GRAPHS", raising=False)
    monkeypatch.setattr("platform.machine", lambda: "aarch64")  # a Jetson: native CPU flags
    assert llama_gpu_status(build(False, b"CPU : NEON = 1 | ")) == (
        'no (CPU build; for CUDA: CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native" '
        "pip install --force-reinstall --no-deps --no-binary llama-cpp-python "
        "llama-cpp-python==0.3.36)"
    )
    assert llama_gpu_status(build(True, cuda)) == (
        "yes, with CUDA graphs, one a context: a pass of a new width runs uncaptured, "
        "which the calibration measures and the controller prices"
    )
    monkeypatch.setenv("GGML_CUDA_DISABLE_GRAPHS", "1")
    assert llama_gpu_status(build(True, cuda)) == (
        "yes, without CUDA graphs (this build, or GGML_CUDA_DISABLE_GRAPHS)"
    )


# --- one place decides k and the device --------------------------------------------------


def test_a_fixed_k_with_the_auto_drafter_is_refused_by_name(capsys, tmp_path):
    code, _, err = run_cli(
        capsys, "run", "--target", str(tmp_path / "absent.gguf"), "--prompt", "hi", "--k", "4"
    )
    assert code == 2
    assert one_error_line(err) == (
        "--k 4 fixes the draft length, which needs one drafter: add --drafter model, eagle, "
        "mtp or ngram (with --drafter auto, k is chosen per step up to --k-max)"
    )


def test_k_rules_live_in_spec_options():
    from edgespec.controller import AdaptivePolicy, CostCurve, FixedPolicy
    from edgespec.drafters import NgramDrafter
    from edgespec.loader import SpecOptions, make_policy

    drafters = [NgramDrafter()]
    fixed = make_policy(SpecOptions("ngram", k=3), drafters, None)
    assert isinstance(fixed, FixedPolicy) and (fixed.drafter_name, fixed.k) == ("ngram", 3)
    adaptive = make_policy(SpecOptions("auto", k_max=5), drafters, CostCurve([1.0] * 6))
    assert isinstance(adaptive, AdaptivePolicy) and adaptive.k_max == 5
    assert SpecOptions("auto").adaptive and not SpecOptions("none").adaptive


def test_the_draft_confidence_ends_drafts_only_where_k_is_chosen_per_step(tiny_pair):
    from edgespec.drafters import ModelDrafter
    from edgespec.loader import SpecOptions, make_drafters
    from edgespec.pair import open_pair

    pair = open_pair(*tiny_pair)

    def confidence(spec):
        return next(d for d in make_drafters(spec, pair, None) if isinstance(d, ModelDrafter))

    assert confidence(SpecOptions("auto")).confidence == 0.7  # the default
    assert confidence(SpecOptions("auto", draft_confidence=0.4)).confidence == 0.4
    assert confidence(SpecOptions("model", k=4)).confidence == 0.0  # drafted whole


def test_flags_that_would_fight_are_refused_with_the_fix(capsys):
    """A confidence under a fixed k, and a k past the widest verify pass: one line each."""
    from edgespec.loader import SpecOptions

    with pytest.raises(EdgespecError) as fixed:
        SpecOptions("model", k=4, draft_confidence=0.4)
    assert str(fixed.value) == (
        "--draft-confidence ends drafts early, but --k 4 drafts 4 tokens every step; drop "
        "--draft-confidence, or use --k auto"
    )
    for flag, spec in (("--k-max 17", {"k_max": 17}), ("--k 20", {"drafter": "model", "k": 20})):
        with pytest.raises(EdgespecError) as wide:
            SpecOptions(**spec)
        name, value = flag.split()
        assert str(wide.value) == (
            f"{flag} is more than 16, the longest draft edgespec verifies (its widest pass, "
            f"17 tokens, is the widest CUDA graph captured); use {name} 16 or less"
        )
    SpecOptions(k_max=16)  # the longest is allowed
    assert main(["run", "--target", "t.gguf", "--prompt", "x", "--k-max", "40"]) == 2
    assert "--k-max 40 is more than 16" in capsys.readouterr().err
    assert main(["run", "--target", "t.gguf", "--prompt", "x", "--lookup-history", "2"]) == 2
    assert capsys.readouterr().err == (
        "edgespec: error: --lookup-history drafts from earlier completions, and run makes one; "
        "drop it, or use it with edgespec serve\n"
    )


def test_the_help_states_the_k_rule_and_what_a_target_may_be(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "N: every step drafts N tokens (needs --drafter model, eagle or ngram)" in help_text
    assert (
        "a .gguf file, a bundle folder (edgespec export), an ONNX folder or a name `edgespec "
        "models list` shows (demo-target)" in help_text
    )


def test_device_rules_live_in_runtime_options():
    from edgespec.backends import RuntimeOptions
    from edgespec.errors import EdgespecError

    assert RuntimeOptions().gpu_layers() == 0
    assert RuntimeOptions(device="cuda").gpu_layers() == -1  # llama.cpp: every layer
    assert RuntimeOptions(device="cuda", n_gpu_layers=12).gpu_layers() == 12
    with pytest.raises(EdgespecError, match="add --device cuda"):
        RuntimeOptions(n_gpu_layers=12)
    with pytest.raises(EdgespecError, match="device 'gpu' is unknown; choose cpu or cuda"):
        RuntimeOptions(device="gpu")


def test_n_gpu_layers_is_refused_for_an_onnx_model(capsys, tmp_path):
    (tmp_path / "model.json").write_text("{}")
    code, _, err = run_cli(
        capsys,
        "run",
        "--target",
        str(tmp_path),
        "--prompt",
        "hi",
        "--device",
        "cuda",
        "--n-gpu-layers",
        "4",
        "--drafter",
        "none",
    )
    assert code == 2
    assert one_error_line(err) == (
        f"{tmp_path} is an ONNX model: --n-gpu-layers is for GGUF models (llama.cpp); "
        "run it on the GPU with --device cuda"
    )


@pytest.fixture
def named_tiny_pair(tmp_path, monkeypatch, tiny_pair):
    """The tiny pair registered under the demo pair's names, fetched into a home of its own."""
    import hashlib
    import shutil

    from edgespec.app import models

    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    (tmp_path / "models").mkdir()
    paths = []
    for name, source in zip(("demo-target", "demo-draft"), tiny_pair):
        data = source.read_bytes()
        spec = models.ModelSpec(name, "tiny", "x-part", "1", 1, hashlib.sha256(data).hexdigest(),
                                len(data))  # fmt: skip
        monkeypatch.setitem(models.MODELS, name, spec)
        paths.append(shutil.copy(source, tmp_path / "models" / spec.filename))
    return paths


def test_run_takes_the_names_models_knows(capsys, named_tiny_pair):
    code, out, err = run_cli(capsys, "run", "--target", "demo-target", "--draft", "demo-draft",
                             "--prompt", "hi", "--max-tokens", "4", "--json", "--no-lessons",
                             "--drafter", "model", "--k", "2")  # fmt: skip
    assert code == 0, err
    assert len(json.loads(out)["tokens"]) == 4


def test_serve_takes_the_names_models_knows(capsys, named_tiny_pair):
    code, out, err = run_cli(capsys, "serve", "--target", "demo-target", "--draft", "demo-draft",
                             "--print-handoff", "llama-server")  # fmt: skip
    assert code == 0, err
    target, draft = named_tiny_pair
    assert f"-m {target} " in out and f"--model-draft {draft} " in out


def test_a_name_not_fetched_says_how_to_fetch_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    code, _, err = run_cli(capsys, "run", "--target", "demo-target", "--prompt", "hi")
    assert code == 2
    assert one_error_line(err) == (
        f"model demo-target is not fetched yet ({tmp_path / 'models' / 'demo-target.gguf'} "
        "missing); run `edgespec models fetch demo`"
    )
