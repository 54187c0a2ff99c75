"""bench/load.py: the schedule, each worker's environment, bounded jobs, and a short real run
on the tiny model for each back-end (its figures are not checked: only their shape)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import load_bench_script

REPO = Path(__file__).resolve().parents[1]


def load_module():
    return load_bench_script("load.py", "bench_load")


def test_quiet_runs_surround_every_job():
    load = load_module()
    assert load.schedule(["busy", "blas"]) == ["quiet", "busy", "quiet", "blas", "quiet"]


def test_bad_configurations_are_refused_before_any_worker_starts():
    load = load_module()
    load.check_config(load.Config("llama", "m.gguf", 2, "default", 8, policy="load-aware"))
    with pytest.raises(SystemExit, match="llama.cpp policy 'adaptive': load-aware, fixed"):
        load.check_config(load.Config("llama", "m.gguf", 2, "default", 8, policy="adaptive"))
    with pytest.raises(SystemExit, match="ONNX Runtime here: policy fixed, no draft"):
        load.check_config(load.Config("onnx", "dir", 2, "shared", 8, draft="d.gguf"))
    with pytest.raises(SystemExit, match="ONNX Runtime wait 'passive'"):
        load.check_config(load.Config("onnx", "dir", 2, "passive", 8))


def test_no_configuration_always_decodes_first():
    load = load_module()
    firsts = [load.turn_order(3, turn)[0] for turn in range(9)]  # quiet turns even, loaded odd
    assert firsts[0::2] == [0, 2, 0, 2, 0] and firsts[1::2] == [0, 2, 0, 2]


def test_worker_environment_sets_only_the_wait_policy(monkeypatch):
    load = load_module()
    monkeypatch.setenv("GOMP_SPINCOUNT", "5")  # the caller's own setting must not leak in
    cfg = load.Config("llama", "m.gguf", 2, "passive", 8)
    env = load.worker_env(cfg)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE" and "GOMP_SPINCOUNT" not in env
    env = load.worker_env(load.Config("llama", "m.gguf", 2, "spin-2000", 8))
    assert env["GOMP_SPINCOUNT"] == "2000" and "OMP_WAIT_POLICY" not in env
    env = load.worker_env(load.Config("llama", "m.gguf", 2, "default", 8))
    assert "GOMP_SPINCOUNT" not in env and "OMP_WAIT_POLICY" not in env
    with pytest.raises(SystemExit):
        load.worker_env(load.Config("onnx", "dir", 2, "passive", 8))


@pytest.mark.parametrize("job", ["busy", "busy-low", "bandwidth", "blas"])
def test_every_job_stops_by_itself(job):
    load = load_module()
    for command in load.job_command(job, 0.2):
        done = subprocess.run(command, env=load.job_env(job), timeout=60)
        assert done.returncode == 0


def check_report(path: Path, backend: str, labels: list[str]) -> None:
    rows = json.loads(path.read_text())["rows"]
    assert [(r["backend"], r["label"]) for r in rows] == [(backend, w) for w in labels]
    for r in rows:
        assert [x["job"] for x in r["runs"]] == ["quiet", "busy", "quiet"]
        assert all(x["tokens"] == 6 for x in r["runs"])
        assert set(r["loaded"]) == {"busy"}


def test_llama_under_a_busy_loop(tiny_pair, tmp_path):
    pytest.importorskip("llama_cpp")
    load = load_module()
    out = tmp_path / "load.json"
    load.main(
        ["--target", str(tiny_pair[0]), "--threads", "1", "--llama-wait", "default,spin-1000",
         "--llama-policy", "load-aware,fixed", "--jobs", "busy", "--tokens", "6",
         "--load-seconds", "5", "--ramp", "0", "--json", str(out)]
    )  # fmt: skip
    labels = ["default/load-aware", "default", "spin-1000/load-aware", "spin-1000"]
    check_report(out, "llama", labels)
    rows = json.loads(out.read_text())["rows"]
    for r in rows:  # one thread asked for: every pass runs on one
        assert all(set(x["passes_by_threads"]) == {"1"} for x in r["runs"])


def test_llama_speculative_loop_under_a_busy_loop(tiny_pair, tmp_path):
    pytest.importorskip("llama_cpp")
    load = load_module()
    out = tmp_path / "load.json"
    load.main(
        ["--target", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--threads", "1",
         "--llama-wait", "default", "--llama-policy", "fixed", "--jobs", "busy",
         "--tokens", "6", "--load-seconds", "5", "--ramp", "0", "--json", str(out)]
    )  # fmt: skip
    check_report(out, "llama", ["default", "default auto"])
    rows = json.loads(out.read_text())["rows"]
    plain, auto = ([sum(x["passes_by_threads"].values()) for x in r["runs"]] for r in rows)
    assert all(n >= 6 for n in plain)  # a pass per token (the prompt's too)
    assert all(n > 6 for n in auto)  # the draft model's passes count as well


def test_onnx_under_a_busy_loop(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    load = load_module()
    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    out = tmp_path / "load.json"
    load.main(
        ["--onnx-target", str(folder), "--threads", "1", "--onnx-wait", "shared-stop,own",
         "--jobs", "busy", "--tokens", "6", "--load-seconds", "5", "--ramp", "0",
         "--json", str(out)]
    )  # fmt: skip
    check_report(out, "onnx", ["shared-stop", "own"])


def test_onnx_session_pools_follow_spinning(tmp_path):
    """In a fresh process: once a process runs the shared pool, no session may have its own."""
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    code = (
        "import sys\n"
        "from edgespec.runtimes.onnxrt import OnnxRuntime\n"
        "for spinning in (False, True):\n"
        "    rt = OnnxRuntime(sys.argv[1], n_ctx=64, spinning=spinning)\n"
        "    o = rt.session.get_session_options()\n"
        "    print(o.use_per_session_threads, *(o.get_session_config_entry(\n"
        "        f'session.{p}_op.allow_spinning') for p in ('intra', 'inter')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder)], capture_output=True, text=True, cwd=REPO
    )
    assert out.stdout.splitlines() == ["True 0 0", "True 1 1"], out.stderr


def test_shared_pool_can_stop_spinning_between_runs(tmp_path):
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from edgespec.runtimes.onnxrt import OnnxRuntime
    from tests.tiny_hf import make_tiny_hf

    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    rt = OnnxRuntime(folder, n_ctx=64, force_spinning_stop=True)
    opts = rt.session.get_session_options()
    assert opts.get_session_config_entry("session.force_spinning_stop") == "1"
    assert rt.forward([1, 2, 3]).shape == (3, rt.n_vocab)


def test_spinning_is_refused_beside_the_shared_pool(tmp_path):
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    code = (
        "import sys\n"
        "from edgespec.runtimes.onnxrt import OnnxRuntime\n"
        "OnnxRuntime(sys.argv[1], n_ctx=64)\n"
        "try:\n"
        "    OnnxRuntime(sys.argv[1], n_ctx=64, spinning=False)\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(folder)], capture_output=True, text=True, cwd=REPO
    )
    assert out.stdout.strip() == (
        "spinning=False needs a thread pool of this session's own, but this process already "
        "runs ONNX Runtime's shared pool; open it in a fresh process"
    ), out.stderr


@pytest.mark.parametrize(
    "user_env, expected",
    [({}, "1234"), ({"OMP_WAIT_POLICY": "ACTIVE"}, None), ({"GOMP_SPINCOUNT": "7"}, "7")],
)
def test_openmp_wait_default_yields_to_the_user(user_env, expected):
    pytest.importorskip("llama_cpp")
    code = (
        "import os, edgespec.runtimes.llamacpp as m\n"
        "m.GOMP_SPINCOUNT_DEFAULT = 1234\n"
        "m.import_llama_cpp()\n"
        "print(os.environ.get('GOMP_SPINCOUNT'))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", code], env={**env, **user_env}, capture_output=True, text=True
    )
    assert out.stdout.strip() == str(expected)
