"""Transparent huge pages for the weights' memory on Linux, through glibc's malloc tunable.

A CPU pass streams every weight once. ONNX Runtime's prepacked weights and llama.cpp's
repacked ones live in anonymous memory, and with 4 KiB pages a pass walks the page tables
for every 4 KiB of them. glibc 2.35+ asks the kernel for 2 MiB pages for its allocations under
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (one-token passes 5-9% faster on a CPU, decoding 2-5%:
docs/decisions.md). glibc reads tunables when a process starts, so the `edgespec` command
re-executes itself once with the tunable added before it loads a model; a Python app sets it
in the environment it starts Python with. EDGESPEC_HUGE_PAGES=0 leaves a process as it is,
and a GLIBC_TUNABLES that already names the tunable is kept as given.

A KV cache is allocated for the whole context and filled a row at a time: in huge pages a
short conversation would hold all of it resident, so its buffers ask for small pages
(lazy_zeros). NumPy itself asks for huge pages for arrays of 4 MiB and more, tunable or not.
"""

from __future__ import annotations

import mmap
import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np

TUNABLE = "glibc.malloc.hugetlb=1"
ENV_OFF = "EDGESPEC_HUGE_PAGES"  # "0": no re-execution, no tunable added
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")
MIN_GLIBC = (2, 35)  # the first glibc with glibc.malloc.hugetlb


def thp_mode(path: Path = THP_ENABLED) -> str | None:
    """The kernel's transparent huge page mode (always, madvise, never); None if unknown."""
    try:
        text = path.read_text()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else None


def glibc_version() -> tuple[int, int] | None:
    name, version = platform.libc_ver()
    if name != "glibc":
        return None
    try:
        major, minor = version.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def why_not(
    environ: Mapping[str, str],
    glibc: tuple[int, int] | None,
    thp: str | None,
    system: str = sys.platform,
) -> str | None:
    """Why this process cannot or should not get the tunable; None if it can."""
    if system != "linux":
        return "Linux only"
    if environ.get(ENV_OFF) == "0":
        return f"turned off ({ENV_OFF}=0)"
    if glibc is None:
        return "needs glibc (another C library here)"
    if glibc < MIN_GLIBC:
        return f"glibc {glibc[0]}.{glibc[1]} lacks glibc.malloc.hugetlb (2.35+)"
    if thp in (None, "never"):
        return f"the kernel's transparent huge pages are off ({THP_ENABLED}: {thp or 'missing'})"
    return None


def named(environ: Mapping[str, str]) -> str | None:
    """The glibc.malloc.hugetlb setting GLIBC_TUNABLES gives, if it names one."""
    for item in environ.get("GLIBC_TUNABLES", "").split(":"):
        key, _, value = item.partition("=")
        if key == "glibc.malloc.hugetlb":
            return value
    return None


def with_tunable(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of environ whose GLIBC_TUNABLES also asks for huge pages."""
    env = dict(environ)
    tunables = env.get("GLIBC_TUNABLES", "")
    env["GLIBC_TUNABLES"] = f"{tunables}:{TUNABLE}" if tunables else TUNABLE
    return env


def status(environ: Mapping[str, str] = os.environ) -> str:
    """One line for `edgespec doctor`: whether this process's allocations get huge pages."""
    thp = thp_mode()
    reason = why_not(environ, glibc_version(), thp)
    if reason is not None:
        return f"off: {reason}"
    value = named(environ)
    if value is None:
        return (
            f"off in this process: start Python with GLIBC_TUNABLES={TUNABLE} "
            "(the edgespec command does) for faster CPU passes"
        )
    if value != "1":
        return f"as GLIBC_TUNABLES gives it (glibc.malloc.hugetlb={value}); 1 turns them on"
    return f"on (GLIBC_TUNABLES {TUNABLE}, kernel mode {thp})"


def reexec_with_tunable() -> None:
    """Replace this process by itself with the tunable added, where it can and would help;
    otherwise return. The `edgespec` command calls it before loading a model."""
    if getattr(sys, "frozen", False) or not sys.executable or not sys.orig_argv:
        return
    if why_not(os.environ, glibc_version(), thp_mode()) or named(os.environ) is not None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, sys.orig_argv, with_tunable(os.environ))
    except OSError:  # the interpreter cannot be run again (gone, or not executable): go on
        pass


def lazy_zeros(shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
    """A zeroed array in an anonymous mapping of its own, in 4 KiB pages: resident only where
    written, whatever malloc and NumPy would do with an allocation this size (huge pages
    from either, or a heap chunk zeroed through). For a KV cache sized for the whole context."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if nbytes == 0 or sys.platform != "linux":
        return np.zeros(shape, dtype)
    # private: a fork's copy is its own (mmap's default, shared, would be written by both)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    memory = mmap.mmap(-1, nbytes, flags=flags)  # the array holds it: unmapped with it
    try:
        memory.madvise(mmap.MADV_NOHUGEPAGE)
    except OSError:  # EINVAL from a kernel built without THP: its pages are small anyway
        pass
    return np.frombuffer(memory, dtype).reshape(shape)
