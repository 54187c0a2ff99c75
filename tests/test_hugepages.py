"""Huge pages for the weights (plumbing/hugepages.py): when the `edgespec` command starts again
with glibc's malloc tunable, what `doctor` says, and KV caches that stay small-paged."""

import os
import subprocess
import sys

import numpy as np
import pytest

from edgespec.plumbing import hugepages
from edgespec.plumbing.hugepages import (
    ENV_OFF,
    TUNABLE,
    lazy_zeros,
    named,
    thp_mode,
    why_not,
    with_tunable,
)

GOOD = ((2, 36), "madvise")  # glibc, kernel mode where the tunable applies


def test_why_not_names_each_reason():
    assert why_not({}, *GOOD, system="linux") is None
    assert why_not({}, (2, 35), "always", system="linux") is None
    assert why_not({}, *GOOD, system="darwin") == "Linux only"
    assert why_not({"EDGESPEC_HUGE_PAGES": "0"}, *GOOD, system="linux") == (
        "turned off (EDGESPEC_HUGE_PAGES=0)"
    )
    assert why_not({"EDGESPEC_HUGE_PAGES": "1"}, *GOOD, system="linux") is None
    assert why_not({}, None, "madvise", system="linux") == "needs glibc (another C library here)"
    assert why_not({}, (2, 31), "madvise", system="linux") == (
        "glibc 2.31 lacks glibc.malloc.hugetlb (2.35+)"
    )
    assert why_not({}, (2, 36), "never", system="linux") == (
        "the kernel's transparent huge pages are off "
        "(/sys/kernel/mm/transparent_hugepage/enabled: never)"
    )
    assert why_not({}, (2, 36), None, system="linux") == (
        "the kernel's transparent huge pages are off "
        "(/sys/kernel/mm/transparent_hugepage/enabled: missing)"
    )


def test_the_tunable_joins_what_glibc_tunables_holds():
    assert with_tunable({"PATH": "/bin"}) == {"PATH": "/bin", "GLIBC_TUNABLES": TUNABLE}
    joined = with_tunable({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert joined["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{TUNABLE}"
    assert named(joined) == "1"
    assert named({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0:glibc.malloc.arena_max=2"}) == "0"
    assert named({"GLIBC_TUNABLES": "glibc.malloc.hugetlb_x=1"}) is None
    assert named({}) is None


def test_thp_mode_reads_the_bracketed_choice(tmp_path):
    enabled = tmp_path / "enabled"
    enabled.write_text("always [madvise] never\n")
    assert thp_mode(enabled) == "madvise"
    enabled.write_text("[always] madvise never\n")
    assert thp_mode(enabled) == "always"
    enabled.write_text("garbage\n")
    assert thp_mode(enabled) is None
    assert thp_mode(tmp_path / "missing") is None


def doctor_line(env: dict[str, str]) -> str:
    """`edgespec doctor`'s huge-pages line, run as a user runs it: a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "edgespec", "doctor"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = {line[:24].strip(): line[25:] for line in done.stdout.splitlines()}
    return lines["huge pages"]


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", ENV_OFF)}


def test_the_command_starts_again_with_huge_pages_where_they_apply():
    reason = why_not({}, hugepages.glibc_version(), thp_mode())
    if reason is not None:
        assert doctor_line(base_env()) == f"off: {reason}"
        pytest.skip(f"huge pages do not apply here: {reason}")
    assert doctor_line(base_env()) == f"on (GLIBC_TUNABLES {TUNABLE}, kernel mode {thp_mode()})"
    assert doctor_line(base_env() | {"EDGESPEC_HUGE_PAGES": "0"}) == (
        "off: turned off (EDGESPEC_HUGE_PAGES=0)"
    )
    given = base_env() | {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}
    assert doctor_line(given) == (
        "as GLIBC_TUNABLES gives it (glibc.malloc.hugetlb=0); 1 turns them on"
    )


def test_a_caller_s_argument_list_never_restarts_the_process(capsys, monkeypatch):
    from edgespec.app.cli import main

    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setattr(os, "execve", lambda *a: pytest.fail(f"execve{a}"))
    assert main(["doctor"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("huge pages"))
    if why_not({}, hugepages.glibc_version(), thp_mode()) is None:
        assert line[25:] == (
            f"off in this process: start Python with GLIBC_TUNABLES={TUNABLE} "
            "(the edgespec command does) for faster CPU passes"
        )


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/statm")
def test_a_kv_buffer_is_resident_only_where_written():
    """One float every 2 MiB of a 64 MiB buffer: 32 small pages (128 KiB), where huge pages
    (NumPy asks for them for arrays this size) would make all 64 MiB resident."""
    kv = lazy_zeros((32, 2 << 20 >> 2), np.float32)
    assert kv.shape == (32, 524288) and kv.dtype == np.float32
    before = resident_bytes()
    kv[:, 0] = 1.0
    grown = resident_bytes() - before
    assert grown < 8 << 20, f"{grown >> 20} MiB resident for 32 floats"
    assert kv.sum() == 32.0 and not kv[:, 1:].any()
    assert lazy_zeros((0, 4), np.float16).shape == (0, 4)


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/statm")
def test_an_onnx_kv_cache_for_a_long_context_is_resident_only_where_filled(tmp_path):
    """A tiny model opened for 65,536 tokens: 8 MiB per layer and kind (32 MiB), which NumPy
    would put in huge pages. A 4-token pass writes 4 rows per head: 16 small pages per buffer."""
    import json

    pytest.importorskip("onnxruntime")
    from edgespec.export.onnx_export import export_onnx
    from edgespec.runtimes.onnxrt import OnnxRuntime
    from tests.tiny_hf import make_tiny_hf

    hf = make_tiny_hf(tmp_path / "hf", arch="qwen2", seed=3)
    config = json.loads((hf / "config.json").read_text())
    (hf / "config.json").write_text(json.dumps(config | {"max_position_embeddings": 65536}))
    folder = export_onnx(hf, tmp_path / "onnx")
    OnnxRuntime(folder, n_ctx=64).forward([4, 5, 6, 7])  # what a first session allocates
    before = resident_bytes()
    runtime = OnnxRuntime(folder, n_ctx=65536)
    runtime.forward([4, 5, 6, 7], last_only=True)
    grown = resident_bytes() - before
    assert grown < 8 << 20, f"{grown >> 20} MiB resident after a 4-token pass"


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_forked_process_writes_its_own_copy_of_a_kv_buffer():
    kv = lazy_zeros((4, 1024), np.float32)
    pid = os.fork()
    if pid == 0:  # the child: write, and leave without pytest's exit handlers
        kv[:] = 7.0
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    assert not kv.any()


@pytest.mark.skipif(sys.platform != "linux", reason="mmap flags")
def test_a_kernel_without_huge_pages_still_gets_its_kv_buffer(monkeypatch):
    """madvise(MADV_NOHUGEPAGE) fails with EINVAL where the kernel has no THP at all; an
    advice no kernel knows fails the same way here."""
    import mmap

    monkeypatch.setattr(mmap, "MADV_NOHUGEPAGE", 9999)
    kv = lazy_zeros((2, 8), np.float32)
    kv[1, 3] = 2.0
    assert kv.sum() == 2.0
