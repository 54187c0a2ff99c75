"""llama.cpp loads a model whatever the process imported first (issue 45).

On the H100 and H200 the kit's native CUDA build (AMX kernels) died with SIGSEGV in
llama_model_load_from_file whenever numpy came before llama_cpp. Each order here loads a tiny
quantized model in a fresh process with the llama-cpp-python this environment has (the build
scripts/setup.sh installs) and runs one pass; a crash is a negative return code, which the
assertion reports with the child's faulthandler trace.
"""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from edgespec.runtimes.llama_load_probe import (  # noqa: E402 - after the skips
    IMPORT_ORDERS,
    LLAMA_CPU_FEATURES,
    PROMPT,
    LoadResult,
    byte_tokens,
    llama_cpu_cmake_args,
    load_in_child,
    write_probe_gguf,
)

REPO = Path(__file__).resolve().parent.parent
N_VOCAB = len(byte_tokens()) + 3  # the bytes, one merge, two special tokens


@pytest.fixture(scope="module")
def probe_model(tmp_path_factory) -> Path:
    return write_probe_gguf(tmp_path_factory.mktemp("probe") / "probe.gguf")


def assert_loaded(result: LoadResult) -> None:
    assert result.returncode == 0, (
        f"{result.first}: {result.why_not()}; the child's stderr ends:\n{result.tail}"
    )
    assert result.logits_shape == (len(PROMPT), N_VOCAB), result


@pytest.mark.parametrize("first", list(IMPORT_ORDERS))
def test_a_model_loads_and_runs_whatever_was_imported_first(probe_model, first):
    assert_loaded(load_in_child(probe_model, first))


def test_a_child_that_crashes_fails_the_assertion(probe_model):
    """The check can fail: a child killed by SIGSEGV before its load is caught and named."""
    crash = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
    result = load_in_child(probe_model, "numpy first", prelude=crash)
    assert result.returncode == -11 and result.logits_shape is None
    with pytest.raises(AssertionError, match="numpy first: the load died with SIGSEGV"):
        assert_loaded(result)


def test_the_cpu_feature_table_is_setup_shs():
    """scripts/llama_cpu_args.sh (the builds) and LLAMA_CPU_FEATURES (doctor's fix) agree,
    and neither turns AMX on."""
    script = (REPO / "scripts/llama_cpu_args.sh").read_text()
    assert re.findall(r"(\w+):(\w+)", script.split("for pair in", 1)[1].split("; do")[0]) == [
        *LLAMA_CPU_FEATURES
    ]
    assert "AMX" not in script.replace("AMX never", "").split("cmake_args=", 1)[1].upper()
    args = llama_cpu_cmake_args(["fma", "avx2", "avx", "amx_int8", "amx_tile", "avx512f"], "x86_64")
    assert args == "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_AVX512=ON"
    assert llama_cpu_cmake_args(["asimd"], "aarch64") == ""


def test_doctor_names_the_crash_and_the_rebuild(monkeypatch):
    from edgespec.app import doctor
    from edgespec.runtimes import llama_load_probe

    def build(info: bytes):
        return SimpleNamespace(
            llama_supports_gpu_offload=lambda: True,
            llama_print_system_info=lambda: info,
            __version__="0.3.36",
        )

    crashed = LoadResult("numpy first", -11, None, "Fatal Python error: Segmentation fault")
    monkeypatch.setattr(llama_load_probe, "load_in_child", lambda *a, **k: crashed)
    monkeypatch.setattr(doctor.platform, "machine", lambda: "x86_64")
    amx = doctor.llama_numpy_first_status(build(b"CPU : AVX512 = 1 | AMX_INT8 = 1 | "))
    assert amx.startswith(
        "does not load a model: the load died with SIGSEGV (fix: rebuild it without AMX "
        'kernels: CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native -DGGML_NATIVE=OFF'
    )
    assert amx.endswith("pip install --force-reinstall --no-deps --no-binary llama-cpp-python "
                        "llama-cpp-python==0.3.36)")  # fmt: skip
    other = doctor.llama_numpy_first_status(build(b"CPU : AVX2 = 1 | "))
    assert other == (
        "does not load a model: the load died with SIGSEGV (fix: import llama_cpp before "
        "numpy, and report this line (edgespec issue 45))"
    )
    hung = LoadResult("numpy first", None, None, "")
    monkeypatch.setattr(llama_load_probe, "load_in_child", lambda *a, **k: hung)
    assert "no answer within the timeout" in doctor.llama_numpy_first_status(build(b""))
