"""GGUF -> GGUF quantization through llama.cpp's own quantizer (llama_model_quantize)."""

from __future__ import annotations

import ctypes
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from edgespec.errors import EdgespecError, ModelFileError

log = logging.getLogger(__name__)
BLOCK_BYTES = 64 << 20  # float32 rows compared at a time
FULL_DISK_BYTES = 64 << 20  # free space below this after a failed write: the disk is full
PR_SET_PDEATHSIG = 1

# edgespec name -> llama.cpp file type (the bulk of the weights)
FILE_TYPES = {
    "f32": "LLAMA_FTYPE_ALL_F32",
    "f16": "LLAMA_FTYPE_MOSTLY_F16",
    "bf16": "LLAMA_FTYPE_MOSTLY_BF16",
    "q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "q6_k": "LLAMA_FTYPE_MOSTLY_Q6_K",
    "q5_k_m": "LLAMA_FTYPE_MOSTLY_Q5_K_M",
    "q5_0": "LLAMA_FTYPE_MOSTLY_Q5_0",
    "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    "q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
}
# edgespec name -> ggml tensor type (for the output projection, set separately)
TENSOR_TYPES = {
    "f32": "GGML_TYPE_F32",
    "f16": "GGML_TYPE_F16",
    "q8_0": "GGML_TYPE_Q8_0",
    "q6_k": "GGML_TYPE_Q6_K",
    "q5_0": "GGML_TYPE_Q5_0",
    "q4_0": "GGML_TYPE_Q4_0",
    "q4_k": "GGML_TYPE_Q4_K",
}


def quantize_gguf(
    src: Path,
    dst: Path,
    qtype: str,
    *,
    output_tensor_type: str | None = None,
    threads: int | None = None,
) -> Path:
    """Write dst as src quantized to qtype; requantizing an already quantized file is allowed
    (the source's precision then bounds the result's quality).

    llama.cpp's quantizer runs in a child process: it has no way to stop early, and a long
    native call in this process would hold Ctrl-C and SIGTERM until it ended. Here they stop
    the child at once (its partial file is removed)."""
    if qtype not in FILE_TYPES:
        raise EdgespecError(f"unknown GGUF type {qtype!r}; choose one of {', '.join(FILE_TYPES)}")
    if output_tensor_type is not None and output_tensor_type not in TENSOR_TYPES:
        raise EdgespecError(
            f"unknown output tensor type {output_tensor_type!r}; "
            f"choose one of {', '.join(TENSOR_TYPES)}"
        )
    tmp = dst.with_name(dst.name + ".partial")
    nthread = threads or os.cpu_count() or 1
    cmd = [sys.executable, "-m", __name__, str(src), str(tmp), qtype, output_tensor_type or "-"]
    child = subprocess.Popen(
        [*cmd, str(nthread)],
        stderr=subprocess.PIPE,
        preexec_fn=die_with_parent if os.name == "posix" else None,
    )
    try:
        _, err = child.communicate()
    except BaseException:  # Ctrl-C, SIGTERM: stop the child, keep nothing half-written
        child.kill()
        child.wait()
        tmp.unlink(missing_ok=True)
        raise
    text = err.decode("utf-8", "replace")
    for line in text.splitlines():
        log.debug("llama.cpp: %s", line)
    if child.returncode != 0:
        full = disk_full(dst)  # asked before the partial file gives its space back
        tmp.unlink(missing_ok=True)
        if full:  # llama.cpp says only "basic_ios::clear: iostream error"
            raise EdgespecError(no_space_message(dst))
        reason = last_error_line(text)
        raise ModelFileError(
            f"llama.cpp could not quantize {src} to {qtype} (status {child.returncode}"
            f"{': ' + reason if reason else ''})"
        )
    tmp.replace(dst)
    return dst


def disk_full(path: Path) -> bool:
    """After a failed write: is the disk path is on (all but) full?"""
    try:
        return shutil.disk_usage(path.parent).free < FULL_DISK_BYTES
    except OSError:
        return False


def no_space_message(path: Path) -> str:
    return (
        f"no space left on device writing {path}; free some space on that disk or choose an "
        "--out folder on a disk with more room"
    )


def last_error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    return (errors or lines or [""])[-1][:300]


def die_with_parent() -> None:
    """In the child: die if edgespec is killed (even SIGKILL), and take Ctrl-C's default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


def quantize_here(src: str, dst: str, qtype: str, output_tensor_type: str, nthread: int) -> int:
    """The child's work: one call to llama_model_quantize; its status is the exit status."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, FILE_TYPES[qtype])
    params.nthread = nthread
    params.allow_requantize = True
    if output_tensor_type != "-":
        params.output_tensor_type = getattr(llama_cpp, TENSOR_TYPES[output_tensor_type])
    return int(llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params)))


def weight_errors(source: Path, quantized: Path) -> list:
    """The relative error of every 2-D tensor the quantizer changed, against the source
    (dequantized with gguf.quants): the export's per-tensor report. Both tensors are read a
    block of rows at a time, so memory stays bounded whatever the model's size."""
    from gguf import GGUFReader

    from edgespec.quant.reference import ErrorSum, TensorError

    before = {t.name: t for t in GGUFReader(str(source)).tensors}
    errors = []
    for t in GGUFReader(str(quantized)).tensors:
        src = before.get(t.name)
        if src is None or len(t.shape) != 2 or t.tensor_type == src.tensor_type:
            continue  # norms, biases and tensors kept as they were
        n_cols, n_rows = (int(d) for d in t.shape)
        step = max(1, BLOCK_BYTES // (4 * n_cols))
        total = ErrorSum()
        for start in range(0, n_rows, step):
            stop = min(start + step, n_rows)
            total.add(read_rows(source, src, start, stop), read_rows(quantized, t, start, stop))
        errors.append(TensorError(t.name, (n_rows, n_cols), total.value()))
    return errors


def read_rows(path: Path, tensor, start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of a GGUFReader tensor as float32, read with a plain file read (the
    reader's memory map would keep every page it touched resident) and dequantized."""
    from gguf.quants import dequantize

    row_bytes = tensor.data.nbytes // tensor.data.shape[0]
    shape = (stop - start, *tensor.data.shape[1:])
    raw = np.fromfile(
        path,
        dtype=tensor.data.dtype,
        count=math.prod(shape),
        offset=tensor.data_offset + start * row_bytes,
    ).reshape(shape)
    return dequantize(raw, tensor.tensor_type).astype(np.float32, copy=False)


if __name__ == "__main__":  # the child quantize_gguf starts
    src_, dst_, qtype_, output_, nthread_ = sys.argv[1:]
    sys.exit(quantize_here(src_, dst_, qtype_, output_, int(nthread_)))
