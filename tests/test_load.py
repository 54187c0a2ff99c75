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
    with pytest.raises(SystemExit, match="ONNX Runtime here: policy fixed"):
        load.check_config(load.Config("onnx", "dir", 2, "shared", 8, policy="load-aware"))
    for wait in ("passive", "own-spin-0", "own-spin-x"):
        with pytest.raises(SystemExit, match=f"ONNX Runtime wait '{wait}'"):
            load.check_config(load.Config("onnx", "dir", 2, wait, 8))


def test_onnx_waits_name_thread_pools():
    from edgespec.runtimes.onnxrt import SHARED_POOL, ThreadPool

    load = load_module()
    assert load.onnx_pool("default") is None
    assert load.onnx_pool("shared") == SHARED_POOL
    stopping = ThreadPool(shared=True, spin_us=None, stop_after_run=True)
    assert load.onnx_pool("shared-stop") == stopping
    assert load.onnx_pool("own") == ThreadPool(spin_us=0)
    assert load.onnx_pool("own-spin") == ThreadPool(spin_us=None)
    assert load.onnx_pool("own-spin-200") == ThreadPool(spin_us=200)


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


@pytest.mark.parametrize("apart", [False, True])
def test_apart_jobs_run_in_a_session_of_their_own(apart):
    import os

    load = load_module()
    procs = load.start_job("busy-all", 30, apart)
    try:
        sessions = {os.getsid(p.pid) for p in procs}
        assert len(procs) == (os.cpu_count() or 1)
        if apart:  # each its own session's leader: a group of its own under autogroup
            assert sessions == {p.pid for p in procs}
        else:
            assert sessions == {os.getsid(0)}
    finally:
        load.stop_job(procs)
    assert all(p.returncode is not None for p in procs)


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
    draft = export_onnx(make_tiny_hf(tmp_path / "d-hf", arch="qwen2", seed=4), tmp_path / "d")
    out = tmp_path / "load.json"
    load.main(
        ["--onnx-target", str(folder), "--onnx-draft", str(draft), "--threads", "1",
         "--onnx-wait", "shared-stop,own-spin-20", "--jobs", "busy", "--tokens", "6",
         "--load-seconds", "5", "--ramp", "0", "--json", str(out)]
    )  # fmt: skip
    waits = ["shared-stop", "own-spin-20"]
    check_report(out, "onnx", waits + [f"{w} auto" for w in waits])


def test_quiet_turns_compare_configurations_with_nothing_beside(tmp_path):
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    load = load_module()
    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    out = tmp_path / "load.json"
    load.main(
        ["--onnx-target", str(folder), "--threads", "1", "--onnx-wait", "default",
         "--jobs", "quiet,quiet", "--tokens", "6", "--json", str(out)]
    )  # fmt: skip
    (row,) = json.loads(out.read_text())["rows"]
    assert [x["job"] for x in row["runs"]] == ["quiet"] * 5 and row["loaded"] == {}


def run_fresh(code: str, *args: str) -> subprocess.CompletedProcess:
    """ONNX Runtime keeps one thread-pool mode per process: each test gets a process."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO
    )


def test_onnx_sessions_get_the_pool_asked_for(tmp_path):
    """In a fresh process: a pool per session, spinning bounded by default; once a process
    runs the shared pool, a default session joins it."""
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    code = (
        "import sys\n"
        "from edgespec.runtimes.onnxrt import OnnxRuntime, SHARED_POOL, ThreadPool\n"
        "def entry(o, key):\n"
        "    try:\n"
        "        return o.get_session_config_entry(f'session.{key}')\n"
        "    except RuntimeError:  # not set\n"
        "        return None\n"
        "for pool in (None, ThreadPool(spin_us=0), ThreadPool(spin_us=None), SHARED_POOL, None):\n"
        "    rt = OnnxRuntime(sys.argv[1], n_ctx=64, pool=pool)\n"
        "    o = rt.session.get_session_options()\n"
        "    print(o.use_per_session_threads, *(entry(o, key) for key in (\n"
        "        'intra_op.allow_spinning', 'inter_op.allow_spinning',\n"
        "        'intra_op.spin_duration_us')), rt.pool.spin_us)\n"
    )
    out = run_fresh(code, str(folder))
    assert out.stdout.splitlines() == [
        "True 1 1 50 50", "True 0 0 None 0", "True 1 1 None None", "False None None None None",
        "False None None None None",
    ], out.stderr  # fmt: skip


def test_bounded_spinning_lets_idle_workers_sleep():
    """After a run, a pool's idle worker spins ONNX Runtime's count (~30 ms of CPU here)
    unless the pool bounds it: the default pool's workers are asleep within SPIN_US."""
    code = (
        "import statistics, time, numpy as np, onnxruntime as ort\n"
        "from onnx import helper, numpy_helper, TensorProto as T\n"
        "from edgespec.runtimes.onnxrt import ThreadPool, configure_threads, default_pool\n"
        "w = numpy_helper.from_array(np.ones((1024, 4096), np.float32), 'w')\n"
        "x, y = (helper.make_tensor_value_info(n, T.FLOAT, [8, c]) for n, c in (('x', 1024),\n"
        "    ('y', 4096)))\n"
        "g = helper.make_graph([helper.make_node('MatMul', ['x', 'w'], ['y'])], 'g', [x], [y],\n"
        "    [w])\n"
        "model = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])\n"
        "for pool in (ThreadPool(spin_us=None), default_pool()):\n"
        "    opts = ort.SessionOptions()\n"
        "    configure_threads(opts, pool, 2)\n"
        "    s = ort.InferenceSession(model.SerializeToString(), opts)\n"
        "    burned = []\n"
        "    for _ in range(5):\n"
        "        s.run(None, {'x': np.ones((8, 1024), np.float32)})\n"
        "        cpu = time.process_time()\n"
        "        time.sleep(0.2)\n"
        "        burned.append(time.process_time() - cpu)\n"
        "    print(statistics.median(burned) > 0.003)\n"
    )
    pytest.importorskip("onnx")
    out = run_fresh(code)
    assert out.stdout.splitlines() == ["True", "False"], out.stderr


def test_shared_pool_can_stop_spinning_between_runs(tmp_path):
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    code = (
        "import sys\n"
        "from edgespec.runtimes.onnxrt import OnnxRuntime, ThreadPool\n"
        "pool = ThreadPool(shared=True, spin_us=None, stop_after_run=True)\n"
        "rt = OnnxRuntime(sys.argv[1], n_ctx=64, pool=pool)\n"
        "print(rt.session.get_session_options().get_session_config_entry(\n"
        "    'session.force_spinning_stop'), rt.forward([1, 2, 3]).shape == (3, rt.n_vocab))\n"
    )
    out = run_fresh(code, str(folder))
    assert out.stdout.strip() == "1 True", out.stderr


def test_a_pool_of_its_own_is_refused_beside_the_shared_pool(tmp_path):
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    code = (
        "import sys\n"
        "from edgespec.runtimes.onnxrt import OnnxRuntime, SHARED_POOL, ThreadPool\n"
        "OnnxRuntime(sys.argv[1], n_ctx=64, pool=SHARED_POOL)\n"
        "try:\n"
        "    OnnxRuntime(sys.argv[1], n_ctx=64, pool=ThreadPool(spin_us=0))\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    out = run_fresh(code, str(folder))
    assert out.stdout.strip() == (
        "ThreadPool(shared=False, spin_us=0, stop_after_run=False) needs a thread pool of this "
        "session's own, but this process already runs ONNX Runtime's shared pool; open it in a "
        "fresh process"
    ), out.stderr


def test_thread_pools_refuse_what_they_cannot_do():
    from edgespec.runtimes.onnxrt import ThreadPool

    with pytest.raises(ValueError, match="the shared pool spins by ONNX Runtime's count"):
        ThreadPool(shared=True, spin_us=50)
    with pytest.raises(ValueError, match="spin_us must be 0 or more, not -1"):
        ThreadPool(spin_us=-1)


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


@pytest.mark.parametrize(
    ("version", "shared"),
    [("1.25.1", True), ("1.26.0", False), ("1.32.0", False), ("2.0.0", False), ("1.27rc1", False)],
)
def test_bounded_spinning_needs_onnxruntime_1_26(monkeypatch, version, shared):
    """Older ONNX Runtime takes the key and spins by its own count: two such pools took each
    other's cores, so there the shared pool stays."""
    ort = pytest.importorskip("onnxruntime")
    from edgespec.runtimes import onnxrt

    monkeypatch.setattr(ort, "__version__", version)
    monkeypatch.setattr(onnxrt, "_shared_pool_threads", None)
    own = onnxrt.ThreadPool(spin_us=50)
    assert onnxrt.default_pool() == (onnxrt.SHARED_POOL if shared else own)
    status = onnxrt.thread_pool_status()
    assert status.startswith("one shared pool" if shared else "a pool per model"), status
