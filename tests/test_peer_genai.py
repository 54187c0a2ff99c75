"""The onnxruntime-genai peer (edgespec/app/peer_genai.py): its graph adapter against the export
it adapts, and a real onnxruntime-genai generator beside ours in `edgespec bench` on a tiny
float32 ONNX pair made in the test."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the ONNX back-end needs onnxruntime (edgespec[onnx])")
pytest.importorskip("onnx", reason="the ONNX exporter needs onnx (edgespec[onnx])")

from edgespec.app.bench_command import plan_variants, run_bench  # noqa: E402
from edgespec.app.bench_runs import PEER_PLAINS  # noqa: E402
from edgespec.app.peer_genai import (  # noqa: E402
    GENAI_DRAFT,
    GENAI_NGRAM,
    GENAI_PLAIN,
    GenaiPeer,
    genai_graph,
)
from edgespec.app.suites import Prompt  # noqa: E402
from edgespec.backends import RuntimeOptions  # noqa: E402
from edgespec.errors import EdgespecError  # noqa: E402
from edgespec.export.onnx_export import export_onnx  # noqa: E402
from tests.tiny_hf import make_tiny_hf  # noqa: E402


@pytest.fixture(scope="module")
def onnx_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A float32 target and a draft of other weights over the same tokenizer."""
    folder = tmp_path_factory.mktemp("genai-pair")
    target = export_onnx(make_tiny_hf(folder / "t-hf", arch="qwen2", seed=3), folder / "target")
    draft = export_onnx(make_tiny_hf(folder / "d-hf", arch="qwen2", seed=4), folder / "draft")
    return target, draft


def session(path: Path):
    """A bare session on the pool edgespec's own sessions take (ONNX Runtime refuses a pool
    of a session's own once the process runs the shared pool)."""
    import onnxruntime as ort

    from edgespec.runtimes.onnx_threads import configure_threads, default_pool

    opts = ort.SessionOptions()
    configure_threads(opts, default_pool(), 1)
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def empty_cache(s) -> dict[str, np.ndarray]:
    """past_key_values.* with no tokens yet: [1, kv heads, 0, head dim]."""
    return {
        i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
        for i in s.get_inputs()
        if i.name.startswith("past_")
    }


def two_steps(s, feeds_for) -> list[np.ndarray]:
    """A 5-token prefill, then one token on its cache: each pass's logits (every row)."""
    names = [o.name for o in s.get_outputs()]
    past = empty_cache(s)
    logits = []
    for ids, n_before in (([5, 17, 42, 99, 150], 0), ([7], 5)):
        out = dict(zip(names, s.run(None, {**feeds_for(ids, n_before), **past})))
        logits.append(out["logits"])
        past = {k.replace("present", "past_key_values"): v for k, v in out.items() if k != "logits"}
    return logits


def test_the_adapted_graph_gives_the_exports_logits(onnx_pair, tmp_path):
    """attention_mask in, seqlens_k / total_sequence_length / logits_start derived: the
    logits of every row of a prefill and of a decode step equal the export's, exactly."""
    target, _ = onnx_pair
    adapted = session(genai_graph(target, tmp_path / "g"))
    original = session(target / "model.onnx")
    assert [i.name for i in adapted.get_inputs()][:2] == ["input_ids", "attention_mask"]

    def export_feeds(ids, n_before):
        n = n_before + len(ids)
        return {
            "input_ids": np.array([ids], np.int64),
            "seqlens_k": np.array([n - 1], np.int32),
            "total_sequence_length": np.array(n, np.int32),
            "logits_start": np.array([0], np.int64),
        }

    def genai_feeds(ids, n_before):
        n = n_before + len(ids)
        return {"input_ids": np.array([ids], np.int64), "attention_mask": np.ones((1, n), np.int64)}

    mine, theirs = two_steps(original, export_feeds), two_steps(adapted, genai_feeds)
    assert [x.shape for x in theirs] == [(1, 5, mine[0].shape[2]), (1, 1, mine[0].shape[2])]
    for a, b in zip(mine, theirs):
        np.testing.assert_array_equal(a, b)
    assert (tmp_path / "g/model.onnx.data").stat().st_ino == (
        target / "model.onnx.data"
    ).stat().st_ino


def test_a_graph_without_the_exports_inputs_is_refused(onnx_pair, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["input_ids"], ["logits"])],
        "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "n"])],
        [helper.make_tensor_value_info("logits", TensorProto.INT64, [1, "n"])],
    )
    (tmp_path / "m").mkdir()
    onnx.save(helper.make_model(graph), str(tmp_path / "m/model.onnx"))
    with pytest.raises(EdgespecError) as e:
        genai_graph(tmp_path / "m", tmp_path / "out")
    assert str(e.value) == (
        f"{tmp_path / 'm'} is not an edgespec ONNX Runtime export (its graph takes no "
        "seqlens_k, total_sequence_length, logits_start); onnxruntime-genai runs the default "
        "--format onnx"
    )


def test_each_genai_method_brings_genais_plain_once():
    variants = plan_variants(["auto", GENAI_NGRAM, GENAI_DRAFT], [2], [2])
    assert [(v.label, v.baseline) for v in variants] == [
        ("plain", "plain"),
        ("auto", "plain"),
        (GENAI_PLAIN, "plain"),
        (GENAI_NGRAM, GENAI_PLAIN),
        (f"{GENAI_DRAFT} k=4", GENAI_PLAIN),
    ]
    assert PEER_PLAINS[GENAI_DRAFT] == PEER_PLAINS[GENAI_NGRAM] == GENAI_PLAIN


def prompt(pid: str, text: str) -> Prompt:
    return Prompt(pid, ({"role": "user", "content": text},), None)


PROMPTS = [prompt("a-1", "def add(a, b):"), prompt("b-1", "The quick brown fox")]


def test_genai_methods_need_an_onnx_export_and_a_draft(onnx_pair, tiny_pair):
    target, _ = onnx_pair
    with pytest.raises(EdgespecError) as e:
        run_bench(tiny_pair[0], None, PROMPTS, [GENAI_NGRAM], [2], 4, RuntimeOptions(n_ctx=64))
    assert str(e.value) == (
        f"method {GENAI_NGRAM} runs onnxruntime-genai on an ONNX export, not {tiny_pair[0]}; "
        "drop it from --methods"
    )
    with pytest.raises(EdgespecError) as e:
        run_bench(target, None, PROMPTS, [GENAI_DRAFT], [2], 4, RuntimeOptions(n_ctx=64))
    assert str(e.value) == f"method {GENAI_DRAFT} needs a draft model: pass --draft"


def test_genai_methods_refuse_the_gpu(onnx_pair):
    """The peer sets no execution provider: on --device cuda it would time the CPU."""
    from types import SimpleNamespace

    from edgespec.app.bench_command import check_peer_targets

    pair = SimpleNamespace(
        target_path=onnx_pair[0], draft_path=onnx_pair[1], options=SimpleNamespace(device="cuda")
    )
    with pytest.raises(EdgespecError) as e:
        check_peer_targets(pair, plan_variants([GENAI_NGRAM], [2], [2]))
    assert str(e.value) == (
        f"method {GENAI_NGRAM} runs onnxruntime-genai on the CPU only here; drop it from "
        "--methods or --device"
    )


def test_a_failed_start_leaves_no_files(onnx_pair, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime_genai", reason="the peer needs edgespec[peers]")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("model.json", "tokenizer.json"):  # model.json is read checked: both there
        (broken / name).write_text((onnx_pair[0] / name).read_text())
    (broken / "model.onnx").write_bytes(b"not a graph")
    with pytest.raises(EdgespecError) as e:
        GenaiPeer(broken, None, [0], 64, 1)
    assert str(e.value) == (
        f"{broken / 'model.onnx'} is not a readable ONNX graph (DecodeError); "
        "export the bundle again"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken"]


def test_without_onnxruntime_genai_the_error_says_what_to_install(onnx_pair, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime_genai", None)  # import raises ImportError
    with pytest.raises(EdgespecError) as e:
        GenaiPeer(onnx_pair[0], None, [0], 64, 1)
    assert str(e.value) == (
        f"method {GENAI_DRAFT} and {GENAI_NGRAM} need onnxruntime-genai: "
        "pip install 'edgespec[peers]'"
    )


def test_genai_runs_beside_ours_on_the_same_prompts(onnx_pair, tmp_path):
    """A real onnxruntime-genai generator: its plain decoding gives our plain tokens (float32,
    the same graph), its draft and n-gram decoding give its plain tokens, each divided by its
    own plain, in turn with ours per prompt."""
    pytest.importorskip("onnxruntime_genai", reason="the peer needs edgespec[peers]")
    target, draft = onnx_pair
    methods = ["auto", GENAI_NGRAM, GENAI_DRAFT]
    report = run_bench(
        target, draft, PROMPTS, methods, [2], 12, RuntimeOptions(n_ctx=128, n_threads=1), repeat=2
    )
    rows = {r["method"]: r for r in report["rows"]}
    assert list(rows) == ["plain", "auto", GENAI_PLAIN, GENAI_NGRAM, GENAI_DRAFT]
    assert report["order"][:5] == [
        "0:a-1:plain", "0:a-1:auto", f"0:a-1:{GENAI_PLAIN}", f"0:a-1:{GENAI_NGRAM}",
        f"0:a-1:{GENAI_DRAFT} k=4",
    ]  # fmt: skip
    assert rows[GENAI_DRAFT]["baseline"] == rows[GENAI_NGRAM]["baseline"] == GENAI_PLAIN
    assert rows[GENAI_PLAIN]["baseline"] == "plain"
    for name in (GENAI_PLAIN, GENAI_NGRAM, GENAI_DRAFT):
        assert rows[name]["identical"] == 4, (name, rows[name]["departures"])
        assert rows[name]["speedup"] is not None
    draft_runs = rows[GENAI_DRAFT]["runs"]
    assert all(r["stats"]["n_draft_tokens"] > 0 for r in draft_runs)
    assert all(r["stats"]["n_plain_steps"] == 0 for r in draft_runs)
    plain_tokens = [r["n_generated"] for r in rows["plain"]["runs"]]
    assert [r["n_generated"] for r in rows[GENAI_PLAIN]["runs"]] == [n - 1 for n in plain_tokens]
    json.dumps(report)  # the report stays JSON
