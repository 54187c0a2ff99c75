"""A trained draft head (EAGLE-3) from the command line and in bundles: `--head` on run, bench,
serve and export, on a tiny target and a tiny random head made in the test
(tests/tiny_eagle.py): --exact output equal to plain decoding's, greedy and seeded, a bundle
that carries its head and runs with it, and every refusal as one exact line."""

import json
from pathlib import Path

import numpy as np
import pytest

from edgespec.app.cli import main
from edgespec.bundle import read_bundle
from edgespec.runtimes import llama_heads
from tests.tiny_eagle import TARGET, write_head, write_target_and_head

CFG = TARGET
PROMPT = "<|im_start|>user\ndef the rest(a, b):\n    return a<|im_end|>\n<|im_start|>assistant\n"
COMMON = ["--prompt", PROMPT, "--max-tokens", "40", "--json", "--exact", "--n-ctx", "256"]
GREEDY: list[str] = []
SEEDED = [["--temperature", "1.0", "--seed", "1"], ["--temperature", "0.7", "--top-p", "0.9",
                                                     "--seed", "2"]]  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    return write_target_and_head(tmp_path_factory.mktemp("head"))


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["run", "--threads", "1", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> dict:
    code, out, err = run_cli(capsys, *COMMON, *argv)
    assert code == 0, err
    return json.loads(out)


def error_line(capsys, *argv: str, command: str = "run") -> str:
    code = main([command, *argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("edgespec: error: "), err
    return lines[0].removeprefix("edgespec: error: ")


def plain_tokens(capsys, target: Path, sampling: list[str]) -> list[int]:
    result = run_json(capsys, "--target", str(target), *sampling, "--drafter", "none")
    assert len(result["tokens"]) >= 16, "the tiny model should not stop at once"
    return result["tokens"]


@pytest.mark.parametrize("sampling", [GREEDY, *SEEDED], ids=["greedy", "seeded", "top-p"])
def test_run_with_a_head_gives_plain_decodings_tokens(capsys, files, sampling):
    """--head with --drafter eagle at a fixed k, and beside prompt lookup with k chosen per
    step: the same tokens as plain decoding, with the head's drafts verified."""
    target, head = files
    want = plain_tokens(capsys, target, sampling)
    for k in ("1", "4", "8"):
        fixed = run_json(
            capsys, "--target", str(target), "--head", str(head), *sampling,
            "--drafter", "eagle", "--k", k,
        )  # fmt: skip
        assert fixed["tokens"] == want, k
        assert fixed["stats"]["drafted_by_drafter"]["eagle"] > 0
        assert set(fixed["stats"]["steps_by_drafter"]) == {"eagle"}
    auto = run_json(capsys, "--target", str(target), "--head", str(head), *sampling)
    assert auto["tokens"] == want


def test_the_head_joins_the_drafters_the_controller_chooses_among(files):
    from edgespec.backends import RuntimeOptions
    from edgespec.controller import AdaptivePolicy
    from edgespec.loader import SpecOptions, load_decoder

    opts = RuntimeOptions(n_ctx=256, n_threads=1)
    auto = load_decoder(files[0], None, SpecOptions(), opts, head=files[1])
    assert list(auto.drafters) == ["eagle", "ngram"]
    assert isinstance(auto.policy, AdaptivePolicy)
    ngram = load_decoder(files[0], None, SpecOptions("ngram", k=3), opts, head=files[1])
    assert list(ngram.drafters) == ["ngram"]  # the head is not opened for another drafter


@pytest.fixture(scope="module")
def bundle(files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "b"
    target, head = files
    code = main(["export", "--target", str(target), "--head", str(head), "--out", str(out),
                 "--target-quant", "q8_0"])  # fmt: skip
    assert code == 0
    return out


def test_export_puts_the_head_into_the_bundle_checked(bundle):
    b = read_bundle(bundle)
    assert [(m.role, m.quant, m.path, m.arch) for m in b.models] == [
        ("target", "q8_0", "target.q8_0.gguf", "llama"),
        ("head", "f32", "head.f32.gguf", "eagle3"),
    ]
    target, head = b.models
    assert head.vocab_hash == target.vocab_hash == b.tokenizer["vocab_hash"]
    assert head.n_vocab == target.n_vocab == 279


@pytest.mark.parametrize("sampling", [GREEDY, SEEDED[0]], ids=["greedy", "seeded"])
def test_a_bundle_with_a_head_runs_with_it(capsys, bundle, sampling):
    want = plain_tokens(capsys, bundle, sampling)
    fixed = run_json(capsys, "--target", str(bundle), *sampling, "--drafter", "eagle", "--k", "4")
    assert fixed["tokens"] == want
    assert fixed["stats"]["drafted_by_drafter"]["eagle"] > 0
    assert run_json(capsys, "--target", str(bundle), *sampling)["tokens"] == want


def test_a_bundle_whose_head_was_changed_is_refused(capsys, bundle, tmp_path):
    import shutil

    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    head = copy / "head.f32.gguf"
    data = bytearray(head.read_bytes())
    data[-1] ^= 1
    head.write_bytes(bytes(data))
    assert error_line(capsys, "--target", str(copy), "--prompt", "hi") == (
        f"bundle file {head} does not match its sha256 in the manifest: it was modified or "
        "corrupted; export the bundle again"
    )


# --- refusals, one line each -------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"hidden": 32}, "head.gguf reads hidden states of size 32 but target.gguf has 64"),
        ({"layers": (1, 2, 4)}, "head.gguf extracts layers [1, 2, 4] but target.gguf has layers "
                                "0..3"),
        ({"n_vocab": 270}, "head.gguf has a vocabulary of 270 tokens but target.gguf has 279"),
    ],
)  # fmt: skip
def test_a_head_that_does_not_fit_is_refused_by_run_and_export(
    capsys, files, tmp_path, kwargs, message
):
    bad = write_head(tmp_path / "head.gguf", CFG, **kwargs)
    want = f"{message}; use the head trained for this target"
    target = str(files[0])
    assert error_line(capsys, "--target", target, "--head", str(bad), "--prompt", "hi") == want
    out = tmp_path / "bundle"
    argv = ["--target", target, "--head", str(bad), "--out", str(out), "--target-quant", "q8_0"]
    assert error_line(capsys, *argv, command="export") == want
    assert not out.exists()


def test_a_model_that_is_not_a_head_is_refused(capsys, files):
    target = str(files[0])
    assert error_line(capsys, "--target", target, "--head", target, "--prompt", "hi") == (
        "target.gguf is a 'llama' model, not an EAGLE-3 head (general.architecture 'eagle3'); "
        "give the head's GGUF"
    )


def test_a_missing_head_or_one_not_gguf_is_refused_before_loading(capsys, tmp_path):
    """The target named does not exist: the head is refused first, before any loading."""
    target = str(tmp_path / "absent.gguf")
    missing = tmp_path / "nope.gguf"
    assert error_line(capsys, "--target", target, "--head", str(missing), "--prompt", "hi") == (
        f"draft head not found: {missing}; check the --head path"
    )
    text = tmp_path / "head.safetensors"
    text.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    assert error_line(capsys, "--target", target, "--head", str(text), "--prompt", "hi") == (
        f"--head {text} is not a GGUF file: only GGUF heads are accepted yet; give the head's "
        ".gguf file"
    )


def test_a_hugging_face_head_folder_is_refused_by_run_and_converted_by_export(
    capsys, files, tmp_path
):
    """run and serve take a GGUF head and say how to convert a folder; export converts it
    (export/eagle3_convert.py, tests/test_eagle3_convert.py), refusing an incomplete one
    (here its config lacks the head's sizes) before it writes a bundle."""
    folder = tmp_path / "EAGLE3-head"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    target = str(files[0])
    assert error_line(capsys, "--target", target, "--head", str(folder), "--prompt", "hi") == (
        f"--head {folder} is a folder (a Hugging Face checkpoint?): run and serve take a GGUF "
        f"head; convert it with `edgespec export --target TARGET --head {folder} --out "
        "BUNDLE`, or give the head's .gguf file"
    )
    out = tmp_path / "bundle"
    argv = ["--target", target, "--head", str(folder), "--out", str(out)]
    assert error_line(capsys, *argv, command="export") == (
        f"{folder / 'config.json'} lacks hidden_size (a whole number > 0); download the head's "
        "config again"
    )
    assert not out.exists()


def test_the_eagle_drafter_without_a_head_is_refused(capsys, files):
    argv = ["--target", str(files[0]), "--prompt", "hi", "--drafter", "eagle", "--k", "4"]
    assert error_line(capsys, *argv) == (
        "--drafter eagle needs a draft head: pass --head HEAD.gguf (an EAGLE-3 head trained "
        "for the target)"
    )


def test_a_fixed_k_names_the_eagle_drafter(capsys, files):
    argv = ["--target", str(files[0]), "--head", str(files[1]), "--prompt", "hi", "--k", "4"]
    assert error_line(capsys, *argv) == (
        "--k 4 fixes the draft length, which needs one drafter: add --drafter model, eagle, "
        "mtp or ngram (with --drafter auto, k is chosen per step up to --k-max)"
    )


def test_a_llama_cpp_without_the_head_symbols_is_refused(capsys, files, monkeypatch):
    """A build lacking one of llama-ext.h's functions (here one no build has)."""
    symbol = "_Z24llama_no_such_head_entryv"
    monkeypatch.setitem(llama_heads.EXT_FUNCTIONS, "no_such", (symbol, [], None))
    monkeypatch.setattr(llama_heads, "_ext", None)
    argv = ["--target", str(files[0]), "--head", str(files[1]), "--prompt", "hi"]
    assert error_line(capsys, *argv) == (
        f"this llama.cpp build cannot run draft heads: its libllama lacks {symbol} (no_such, "
        "from llama-ext.h); install llama-cpp-python 0.3.36 (pip install "
        "llama-cpp-python==0.3.36), or drop --head"
    )


def test_a_head_on_an_onnx_target_is_refused(capsys, files, tmp_path):
    pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime")
    pytest.importorskip("onnx", reason="the ONNX exporter needs onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    onnx = export_onnx(make_tiny_hf(tmp_path / "hf", seed=3), tmp_path / "onnx")
    argv = ["--target", str(onnx), "--head", str(files[1]), "--prompt", "hi"]
    assert error_line(capsys, *argv) == (
        f"--head {files[1]}: {onnx} outputs no hidden states for a head to read "
        "(OnnxRuntime); give the target as a GGUF file, or export an ONNX bundle with the "
        "head (edgespec export --format onnx --head), or drop --head"
    )


def test_export_refuses_a_head_for_tensorrt(capsys, files, tmp_path):
    out = tmp_path / "trt"
    argv = ["--target", str(files[0]), "--head", str(files[1]), "--out", str(out)]
    assert error_line(capsys, *argv, "--format", "tensorrt", command="export") == (
        f"--head {files[1]}: heads run on llama.cpp and ONNX Runtime, not TensorRT yet; export "
        "with --format gguf or onnx, or drop --head"
    )
    assert not out.exists()


@pytest.fixture(scope="module")
def onnx_bundle(files, tmp_path_factory) -> Path:
    """An ONNX bundle exported with the head: the target outputs the head's layers' inputs,
    the head is an ONNX folder (export/eagle3_onnx.py)."""
    pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime")
    from tests.tiny_gguf import random_weights, vocabulary, write_gguf

    root = tmp_path_factory.mktemp("onnx-bundle")
    weights = random_weights(TARGET, len(vocabulary()[0]), 0)  # files[0]'s, its tokenizer
    target = write_gguf(root / "t.gguf", TARGET, weights, pre="gpt-2")  # rebuilt for ONNX
    code = main(["export", "--target", str(target), "--head", str(files[1]), "--format", "onnx",
                 "--device", "cpu", "--target-quant", "fp32", "--draft-quant", "fp32",
                 "--out", str(root / "b")])  # fmt: skip
    assert code == 0
    return root / "b"


def test_an_onnx_bundle_with_a_head_runs_with_it(capsys, onnx_bundle):
    b = read_bundle(onnx_bundle)
    target, head = b.models
    assert (target.role, target.format, head.role, head.format, head.path) == (
        "target",
        "onnx",
        "head",
        "onnx",
        "head.fp32",
    )
    assert head.vocab_hash == target.vocab_hash
    target_json = json.loads((onnx_bundle / target.path / "model.json").read_text())
    assert target_json["hidden_layers"] == [1, 2, 3]
    for sampling in (GREEDY, SEEDED[0]):
        want = plain_tokens(capsys, onnx_bundle, sampling)
        args = ("--target", str(onnx_bundle), *sampling)
        fixed = run_json(capsys, *args, "--drafter", "eagle", "--k", "4")
        assert fixed["tokens"] == want
        assert fixed["stats"]["drafted_by_drafter"]["eagle"] > 0
        assert run_json(capsys, *args)["tokens"] == want


def test_serve_hands_off_no_head(capsys, files):
    argv = [str(files[0]), "--head", str(files[1]), "--print-handoff", "llama-server"]
    assert error_line(capsys, *argv, command="serve") == (
        "--print-handoff hands over the draft model and prompt lookup, not a draft head; "
        "drop --head"
    )


def test_bench_runs_the_head_as_method_eagle_and_within_auto(files):
    from edgespec.app.bench_command import run_bench
    from edgespec.app.suites import Prompt
    from edgespec.backends import RuntimeOptions

    prompts = [Prompt("code-01", ({"role": "user", "content": "def the rest(a, b):"},))]
    opts = RuntimeOptions(n_ctx=256, n_threads=1, exact=True)
    report = run_bench(files[0], None, prompts, ["eagle", "auto"], [2, 4], 24, opts, head=files[1])
    rows = {(r["method"], r["k"]): r for r in report["rows"]}
    assert list(rows) == [("plain", "-"), ("eagle", 2), ("eagle", 4), ("auto", "auto")]
    assert all(r["identical"] == 1 for r in rows.values())
    assert rows[("eagle", 4)]["n_drafts"] > 0
    assert report["head"] == str(files[1])


@pytest.mark.parametrize("kind", ["gguf", "onnx"])
def test_serve_drafts_with_a_bundles_head_across_requests(capsys, request, kind):
    """A server's decoder keeps the target's cache from request to request (the head's is
    rebuilt from the kept hidden states): each answer is plain decoding's, on llama.cpp and
    on ONNX Runtime."""
    pytest.importorskip("uvicorn", reason="edgespec serve needs edgespec[serve]")
    bundle = request.getfixturevalue("bundle" if kind == "gguf" else "onnx_bundle")
    capsys.readouterr()  # an export's report, where the bundle was made just now
    from edgespec.backends import RuntimeOptions
    from edgespec.loader import SpecOptions, load_decoder

    opts = RuntimeOptions(n_ctx=256, n_threads=1, exact=True)
    decoder = load_decoder(bundle, None, SpecOptions("eagle", k=4), opts, reuse_cache=True)
    longer = PROMPT + "def"
    want = [plain_tokens(capsys, bundle, GREEDY)]
    want.append(run_json(capsys, "--target", str(bundle), "--drafter", "none",
                         "--prompt", longer)["tokens"])  # fmt: skip
    check_served_across_requests(decoder, [PROMPT, longer], want)


def check_served_across_requests(decoder, prompts: list[str], want: list[list[int]]) -> None:
    """A live server over decoder answers each prompt in turn (greedy, 40 tokens) with the
    tokens wanted, drafted, each after the first reusing the cache of the one before."""
    import httpx

    from edgespec.server import create_app
    from edgespec.server.config import ServerConfig
    from tests.live_server import LiveServer

    with LiveServer(create_app(decoder, ServerConfig(model_id="tiny"))) as server:
        for i, (prompt, tokens) in enumerate(zip(prompts, want)):
            body = {"model": "tiny", "prompt": prompt, "max_tokens": 40, "temperature": 0}
            answer = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()
            assert answer["x_edgespec"]["tokens"] == tokens
            assert answer["timings"]["draft_n"] > 0
            assert (answer["timings"]["cache_n"] > 0) == (i > 0)  # reuses the request before


def test_a_target_whose_llama_cpp_graph_keeps_no_layer_inputs_is_refused(capsys, files, tmp_path):
    """A Qwen2 GGUF: this llama.cpp keeps no layer inputs for it, and reading them aborted the
    process; refused as one line before the head loads."""
    from tests.bench_scripts import load_bench_script

    make_gguf = load_bench_script("gpu/make_gguf.py", "gpu_make_gguf")
    qwen2 = make_gguf.write_gguf("tiny", "q8_0", tmp_path / "qwen2.gguf", None)
    head = files[1]
    assert error_line(capsys, "--target", str(qwen2), "--head", str(head), "--prompt", "hi") == (
        f"{head.name}: qwen2.gguf is a 'qwen2' model, whose inputs to each layer this llama.cpp "
        "does not keep, so no EAGLE-3 head can read them (it runs on llama, qwen3, gpt-oss and "
        "other targets); drop --head"
    )


def test_an_onnx_bundle_takes_a_hugging_face_head_converted(capsys, onnx_bundle, tmp_path):
    """--head FOLDER with --format onnx: converted against the target's GGUF, then exported
    as the ONNX head; its layers are the ones the target outputs."""
    from tests.test_eagle3_convert import LAYERS, write_hf_head

    target = onnx_bundle.parent / "t.gguf"
    hf = write_hf_head(tmp_path / "hf", layers=LAYERS)
    out = tmp_path / "b"
    code = main(["export", "--target", str(target), "--head", str(hf), "--format", "onnx",
                 "--device", "cpu", "--target-quant", "fp32", "--draft-quant", "fp32",
                 "--out", str(out)])  # fmt: skip
    assert code == 0
    capsys.readouterr()  # the export's report
    target_folder = read_bundle(out).models[0].path
    assert json.loads((out / target_folder / "model.json").read_text())["hidden_layers"] == [
        2,
        1,
        3,
    ]
    want = plain_tokens(capsys, out, GREEDY)
    fixed = run_json(capsys, "--target", str(out), "--drafter", "eagle", "--k", "2")
    assert fixed["tokens"] == want and fixed["stats"]["drafted_by_drafter"]["eagle"] > 0


def run_head_cost(target: Path, tmp_path: Path, monkeypatch) -> dict:
    """bench/head_cost.py on target (1 thread, 2 repetitions); its JSON report."""
    from tests.bench_scripts import load_bench_script

    bench = load_bench_script("head_cost.py", "bench_head_cost")
    out = tmp_path / "head-cost.json"
    argv = ["head_cost.py", str(target), "--threads", "1", "--reps", "2", "--json", str(out)]
    monkeypatch.setattr("sys.argv", argv)
    bench.main()
    return json.loads(out.read_text())


def test_bench_head_cost_times_a_bundles_head(capsys, onnx_bundle, tmp_path, monkeypatch):
    """bench/head_cost.py: the head's proposals of k = 1..8 and its cost against the target's
    one-token pass, as a table and JSON (timings themselves are not asserted)."""
    report = run_head_cost(onnx_bundle, tmp_path, monkeypatch)
    assert (report["file"], report["layers"], len(report["propose_ms_by_k"])) == (
        "head.fp32",
        [1, 2, 3],
        8,
    )
    assert report["head_over_target"] == round(report["token_ms"] / report["target_token_ms"], 4)
    assert "| target t(1) ms |" in capsys.readouterr().out


def test_an_onnx_bundle_from_hugging_face_target_and_head(capsys, tmp_path):
    """Both as Hugging Face folders: the head is converted against a GGUF of the target's
    metadata and tokenizer alone (no tensors), then exported; output equals plain."""
    import gguf

    from edgespec.export.hf_to_gguf import write_metadata_gguf
    from tests.test_eagle3_convert import LAYERS, write_hf_head
    from tests.tiny_hf import make_tiny_hf

    target = make_tiny_hf(tmp_path / "target", n_layer=4, seed=3)
    n_vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    lm_head = np.random.default_rng(4).standard_normal((n_vocab, 64)).astype(np.float32)
    hf = write_hf_head(tmp_path / "head", layers=LAYERS, tensors={"lm_head.weight": lm_head},
                       config={"vocab_size": n_vocab, "draft_vocab_size": n_vocab})  # fmt: skip
    meta = gguf.GGUFReader(str(write_metadata_gguf(target, tmp_path / "meta.gguf")))
    assert (
        len(meta.tensors) == 0 and len(meta.fields["tokenizer.ggml.tokens"].contents()) == n_vocab
    )
    out = tmp_path / "b"
    code = main(["export", "--target", str(target), "--head", str(hf), "--format", "onnx",
                 "--device", "cpu", "--target-quant", "fp32", "--draft-quant", "fp32",
                 "--out", str(out)])  # fmt: skip
    assert code == 0
    capsys.readouterr()
    want = run_json(capsys, "--target", str(out), "--drafter", "none", "--max-tokens", "24")
    fixed = run_json(capsys, "--target", str(out), "--drafter", "eagle", "--k", "2",
                     "--max-tokens", "24")  # fmt: skip
    assert fixed["tokens"] == want["tokens"] and fixed["stats"]["drafted_by_drafter"]["eagle"] > 0
