"""`edgespec serve --print-handoff`: the same pair and speculative settings on vLLM or
llama-server, with the model paths the bundle holds; and the serve command's own errors."""

from __future__ import annotations

import json
import shlex

import pytest

from edgespec.app.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["serve", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_llama_server_gets_the_draft_model_and_k(capsys, tiny_pair):
    target, draft = tiny_pair
    code, out, _ = run(
        capsys, "--target", str(target), "--draft", str(draft), "--drafter", "model", "--k", "4",
        "--n-ctx", "2048", "--print-handoff", "llama-server",
    )  # fmt: skip
    assert code == 0
    assert shlex.split(out) == [
        "llama-server", "-m", str(target.resolve()), "-c", "2048",
        "--host", "127.0.0.1", "--port", "8000",
        "--model-draft", str(draft.resolve()), "--draft-max", "4", "--draft-min", "0",
    ]  # fmt: skip


def test_vllm_gets_a_speculative_config(capsys, tiny_pair):
    target, draft = tiny_pair
    code, out, _ = run(
        capsys, "--target", str(target), "--draft", str(draft), "--drafter", "model", "--k", "5",
        "--port", "9000", "--print-handoff", "vllm",
    )  # fmt: skip
    args = shlex.split(out)
    assert code == 0 and args[:4] == ["vllm", "serve", str(target.resolve()), "--max-model-len"]
    assert args[args.index("--port") + 1] == "9000"
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config == {
        "method": "draft_model",
        "model": str(draft.resolve()),
        "num_speculative_tokens": 5,
    }


def test_prompt_lookup_hands_off_as_ngram(capsys, tiny_pair):
    target, _ = tiny_pair
    _, out, _ = run(capsys, "--target", str(target), "--drafter", "ngram", "--k", "3",
                    "--print-handoff", "vllm")  # fmt: skip
    config = json.loads(shlex.split(out)[-1])
    assert config == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 1,
    }
    _, out, _ = run(capsys, "--target", str(target), "--drafter", "ngram", "--k", "3",
                    "--print-handoff", "llama-server")  # fmt: skip
    assert "--spec-type ngram-simple --draft-max 3" in out and "--model-draft" not in out


def test_k_auto_and_plain(capsys, tiny_pair):
    target, draft = tiny_pair
    _, out, _ = run(capsys, "--target", str(target), "--draft", str(draft), "--k-max", "12",
                    "--print-handoff", "llama-server")  # fmt: skip
    assert "--model-draft" in out and "--spec-type ngram-simple --draft-max 12" in out
    _, out, _ = run(capsys, "--target", str(target), "--drafter", "none", "--print-handoff", "vllm")
    assert "--speculative-config" not in out


def test_a_bundle_hands_off_the_models_it_holds(capsys, tmp_path, tiny_pair):
    from edgespec.bundle import Bundle, ModelEntry, sha256_path, write_bundle

    target, draft = tiny_pair
    folder = tmp_path / "bundle"
    folder.mkdir()
    entries = []
    for role, src in (("target", target), ("draft", draft)):
        path = folder / f"{role}.gguf"
        path.write_bytes(src.read_bytes())
        entries.append(
            ModelEntry(
                role,
                "gguf",
                path.name,
                "f32",
                sha256_path(path),
                path.stat().st_size,
                0,
                "",
                512,
                "llama",
            )  # fmt: skip
        )
    write_bundle(Bundle(folder, tuple(entries)))
    _, out, _ = run(capsys, str(folder), "--drafter", "model", "--k", "2", "--print-handoff",
                    "llama-server")  # fmt: skip
    args = shlex.split(out)
    assert args[2] == str((folder / "target.gguf").resolve())
    assert args[args.index("--model-draft") + 1] == str((folder / "draft.gguf").resolve())


@pytest.mark.parametrize(
    "argv,message",
    [
        ([], "give a bundle folder or --target MODEL"),
        (["b", "--target", "t.gguf"], "give a bundle folder or --target MODEL"),
        (["--target", "model_dir", "--print-handoff", "vllm"], "is not a GGUF file"),
        (["--target", "t.gguf", "--max-queue", "-1"], "--max-queue must be >= 0"),
        (["--target", "t.gguf", "--max-body-bytes", "0"], "--max-body-bytes must be >= 1"),
        (["--target", "t.gguf", "--lookup-history", "-2"], "--lookup-history must be >= 0"),
    ],
)
def test_serve_input_errors_are_one_line(capsys, tmp_path, argv, message):
    (tmp_path / "model_dir").mkdir()
    argv = [str(tmp_path / a) if a in ("model_dir",) else a for a in argv]
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.startswith("edgespec: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_the_serve_command_serves_until_terminated(tmp_path, tiny_pair):
    """`python -m edgespec serve` end to end: flags -> a live server -> an answer."""
    import socket
    import subprocess
    import sys
    import threading

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target, draft = tiny_pair
    cmd = [
        sys.executable,
        "-m",
        "edgespec",
        "serve",
        "--target",
        str(target),
        "--draft",
        str(draft),
    ]
    cmd += ["--drafter", "model", "--k", "2", "--n-ctx", "256", "--port", str(port)]
    cmd += ["--api-key", "k3y"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(3000):  # start-up poll; the deadline only turns a hang into a failure
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                threading.Event().wait(0.05)
        auth = {"Authorization": "Bearer k3y"}
        models = httpx.get(url + "/v1/models", headers=auth).json()
        assert models["data"][0]["id"] == "tiny-target"
        assert models["data"][0]["meta"]["n_ctx"] == 256
        body = {"prompt": "def add(a, b):", "max_tokens": 5, "temperature": 0}
        r = httpx.post(url + "/v1/completions", json=body, headers=auth, timeout=300)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5
        assert httpx.post(url + "/v1/completions", json=body).status_code == 401
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert f"http://127.0.0.1:{port}/" in (proc.stderr.read() if proc.stderr else "")
