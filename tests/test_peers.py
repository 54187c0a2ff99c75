"""The llama-server peer (bench/peers/): its flags, and a real server on the tiny pair where
the binary has been built (bench/peers/llama_server.sh caches it)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILT = sorted(Path.home().glob(".cache/edgespec/llama-server/*/llama-server"))


def load_peer():
    spec = importlib.util.spec_from_file_location(
        "llama_server_peer", REPO / "bench/peers/llama_server.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["llama_server_peer"] = module
    spec.loader.exec_module(module)
    return module


def test_server_flags_per_mode(tmp_path):
    peer = load_peer()
    draft = tmp_path / "d.gguf"
    assert peer.mode_flags("plain", None) == []
    assert peer.mode_flags("ngram-mod", None) == ["--spec-type", "ngram-mod"]
    assert peer.mode_flags("draft", draft) == [
        "--model-draft", str(draft), "--spec-type", "draft-simple"
    ]  # fmt: skip
    assert peer.is_stateful(["--spec-type", "ngram-mod"])
    assert peer.is_stateful(["--spec-type", "ngram-simple,ngram-cache"])
    assert not peer.is_stateful(["--model-draft", "ngram-mod.gguf", "--spec-type", "draft-simple"])
    command = peer.server_command(
        Path("/bin/llama-server"), Path("t.gguf"), ["--spec-type", "ngram-mod"],
        port=8123, threads=2, n_ctx=1024,
    )  # fmt: skip
    assert command == [
        "/bin/llama-server", "-m", "t.gguf", "--host", "127.0.0.1", "--port", "8123",
        "-c", "1024", "-t", "2", "-tb", "2", "-np", "1", "--no-ui", "--spec-type", "ngram-mod",
    ]  # fmt: skip


@pytest.mark.skipif(not BUILT, reason="llama-server not built (bench/peers/llama_server.sh)")
def test_llama_server_modes_on_the_tiny_pair(tiny_pair, tmp_path, capsys):
    peer = load_peer()
    target, draft = tiny_pair
    suite = tmp_path / "s.jsonl"
    suite.write_text(
        "\n".join(
            json.dumps({"id": f"x-{i}", "messages": [{"role": "user", "content": f"the {i}"}]})
            for i in (1, 2)
        )
    )
    out = tmp_path / "peer.json"
    peer.main(
        ["--target", str(target), "--draft", str(draft), "--suite", str(suite), "--server",
         str(BUILT[-1]), "--max-tokens", "8", "--threads", "1", "--n-ctx", "256", "--repeat",
         "2", "--json", str(out)]
    )  # fmt: skip
    report = json.loads(out.read_text())["suites"][str(suite)]
    names = ["llama-server", "llama-server-ngram-mod", "llama-server-draft"]
    assert [r["method"] for r in report["rows"]] == names
    assert report["order"][:3] == ["0:x-1:plain", "0:x-1:ngram-mod", "0:x-1:draft"]
    assert report["order"][6:9] == ["1:x-1:draft", "1:x-1:ngram-mod", "1:x-1:plain"]
    assert all(r["prompts"] == 4 for r in report["rows"])
    assert all(r["identical"] == 4 for r in report["rows"][1:])  # float32: same tokens
    assert report["rows"][2]["baseline"] == "llama-server"
    assert report["restarted_per_request"] == ["ngram-mod"]
