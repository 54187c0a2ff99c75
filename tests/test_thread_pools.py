"""What a session's threads do between passes: ONNX Runtime's pools (runtimes/onnx_threads.py) and
llama.cpp's OpenMP wait (runtimes/llamacpp.py). ONNX Runtime keeps one thread-pool mode per
process, so the tests that open sessions each run in a fresh one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_fresh(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO
    )


@pytest.mark.parametrize(
    "bounded, expected",
    [("True", "True 1 1 50 50"), ("False", "False None None None None")],
)
def test_onnx_sessions_get_the_default_pool(tmp_path, bounded, expected):
    """In a fresh process: a pool per session, spinning bounded, where ONNX Runtime can bound
    it; else the process's shared pool."""
    pytest.importorskip("onnx")
    from edgespec.export.onnx_export import export_onnx
    from tests.tiny_hf import make_tiny_hf

    folder = export_onnx(make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3), tmp_path / "onnx")
    code = (
        "import sys\n"
        "from edgespec.runtimes import onnx_threads, onnxrt\n"
        f"onnx_threads.spin_can_be_bounded = lambda: {bounded}\n"
        "def entry(o, key):\n"
        "    try:\n"
        "        return o.get_session_config_entry(f'session.{key}')\n"
        "    except RuntimeError:  # not set\n"
        "        return None\n"
        "for _ in range(2):\n"
        "    rt = onnxrt.OnnxRuntime(sys.argv[1], n_ctx=64)\n"
        "    o = rt.session.get_session_options()\n"
        "    print(o.use_per_session_threads, *(entry(o, key) for key in (\n"
        "        'intra_op.allow_spinning', 'inter_op.allow_spinning',\n"
        "        'intra_op.spin_duration_us')), rt.pool.spin_us)\n"
    )
    out = run_fresh(code, str(folder))
    assert out.stdout.splitlines() == [expected] * 2, out.stderr


def test_bounded_spinning_lets_idle_workers_sleep():
    """After a run, a pool's idle worker spins ONNX Runtime's count (~30 ms of CPU here)
    unless the pool bounds it: the default pool's workers are asleep within SPIN_US."""
    code = (
        "import statistics, time, numpy as np, onnxruntime as ort\n"
        "from onnx import helper, numpy_helper, TensorProto as T\n"
        "from edgespec.runtimes.onnx_threads import ThreadPool, configure_threads, default_pool\n"
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


def test_thread_pools_refuse_what_they_cannot_do():
    from edgespec.runtimes.onnx_threads import ThreadPool

    with pytest.raises(ValueError, match="the shared pool spins by ONNX Runtime's count"):
        ThreadPool(shared=True, spin_us=50)
    with pytest.raises(ValueError, match="spin_us must be 0 or more, not -1"):
        ThreadPool(spin_us=-1)


@pytest.mark.parametrize(
    ("version", "shared"),
    [("1.25.1", True), ("1.26.0", False), ("1.32.0", False), ("2.0.0", False), ("1.27rc1", False)],
)
def test_bounded_spinning_needs_onnxruntime_1_26(monkeypatch, version, shared):
    """Older ONNX Runtime takes the key and spins by its own count: two such pools took each
    other's cores, so there the shared pool stays."""
    ort = pytest.importorskip("onnxruntime")
    from edgespec.runtimes import onnx_threads

    monkeypatch.setattr(ort, "__version__", version)
    monkeypatch.setattr(onnx_threads, "_shared_pool_threads", None)
    own = onnx_threads.ThreadPool(spin_us=50)
    assert onnx_threads.default_pool() == (onnx_threads.SHARED_POOL if shared else own)
    status = onnx_threads.thread_pool_status()
    assert status.startswith("one shared pool" if shared else "a pool per model"), status


@pytest.mark.parametrize(
    "user_env, expected",
    [({}, "1234"), ({"OMP_WAIT_POLICY": "ACTIVE"}, None), ({"GOMP_SPINCOUNT": "7"}, "7")],
)
def test_openmp_wait_default_yields_to_the_user(user_env, expected):
    pytest.importorskip("llama_cpp")
    code = (
        "import os, edgespec.runtimes.llama_library as m\n"
        "m.GOMP_SPINCOUNT_DEFAULT = 1234\n"
        "m.import_llama_cpp()\n"
        "print(os.environ.get('GOMP_SPINCOUNT'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run(
        [sys.executable, "-c", code], env={**env, **user_env}, capture_output=True, text=True
    )
    assert out.stdout.strip() == str(expected)
