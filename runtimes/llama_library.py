"""llama-cpp-python, loaded once per process: the import (libgomp's wait set before it),
llama.cpp's log routed to Python logging with its recent lines kept for error messages, the
load's progress callback (Ctrl-C aborts a load), and the checks made before llama.cpp sees a
file."""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import edgespec.plumbing.interrupts as interrupts
from edgespec.errors import ModelFileError

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
_recent_llama_log: collections.deque[str] = collections.deque(maxlen=20)
_log_callback = None  # the ctypes callback; kept alive for as long as llama.cpp may call it
_backend_ready = False
# GOMP_SPINCOUNT where the user set no OpenMP wait; None: libgomp's own (docs/decisions.md)
GOMP_SPINCOUNT_DEFAULT: int | None = None


def set_openmp_wait() -> None:
    """Before llama.cpp (and with it libgomp, which reads these once) is loaded."""
    if GOMP_SPINCOUNT_DEFAULT is None or "llama_cpp" in sys.modules:
        return
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(GOMP_SPINCOUNT_DEFAULT)


def import_llama_cpp():
    set_openmp_wait()
    try:
        import llama_cpp
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ModelFileError(
            "the llama.cpp back-end needs llama-cpp-python: pip install 'edgespec[llama]'"
        ) from e
    return llama_cpp


def one_graph_build(system_info: bytes, environ: Mapping[str, str]) -> bool:
    """Whether this llama.cpp build replays layers it offloads as one CUDA graph per context:
    ggml-cuda built with graphs ("USE_GRAPHS = 1" among its features) and not turned off by
    GGML_CUDA_DISABLE_GRAPHS."""
    return b"USE_GRAPHS = 1" in system_info and "GGML_CUDA_DISABLE_GRAPHS" not in environ


def init_backend() -> None:
    """Once per process: route llama.cpp's log to Python logging and start its backend."""
    global _backend_ready, _log_callback
    if _backend_ready:
        return
    llama_cpp = import_llama_cpp()

    @llama_cpp.llama_log_callback
    def _on_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        try:
            line = text.decode("utf-8", "replace").rstrip()
            if line:
                _recent_llama_log.append(line)
                log.debug("llama.cpp: %s", line)
        except KeyboardInterrupt:  # ctypes would drop it: raised when the call returns
            interrupts.record()

    _log_callback = _on_log  # keep a reference: llama.cpp holds only the C pointer
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    _backend_ready = True


def check_gguf_file(path: Path) -> None:
    """Refuse what llama.cpp would refuse, with a message that says what is wrong."""
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}; check the path")
    if not path.is_file():
        raise ModelFileError(f"model path is not a file: {path}; give the .gguf file itself")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelFileError(
            f"{path} is not a GGUF file (starts with {magic!r}, expected b'GGUF'); "
            "convert it with `edgespec export` or download the .gguf file again"
        )


def load_progress(llama_cpp):
    """llama.cpp's load progress callback: returning False aborts the load (on Ctrl-C)."""

    @llama_cpp.llama_progress_callback
    def on_progress(fraction: float, user_data: ctypes.c_void_p) -> bool:
        try:
            return not interrupts.stop_requested()
        except KeyboardInterrupt:
            interrupts.record()
            return False

    return on_progress


def clear_llama_log() -> None:
    """Forget the lines logged so far (before a load, whose error is then its own)."""
    _recent_llama_log.clear()


def last_llama_error() -> str | None:
    """The first error llama.cpp logged since the log was cleared: the cause, not the echo."""
    for line in _recent_llama_log:
        if "error" in line.lower():
            return line
    return _recent_llama_log[-1] if _recent_llama_log else None
