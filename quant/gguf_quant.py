"""GGUF -> GGUF quantization through llama.cpp's own quantizer (llama_model_quantize)."""

from __future__ import annotations

import ctypes
import logging
import math
import os
from pathlib import Path

import numpy as np

from edgespec.errors import EdgespecError, ModelFileError

log = logging.getLogger(__name__)
BLOCK_BYTES = 64 << 20  # float32 rows compared at a time

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
    (the source's precision then bounds the result's quality)."""
    import llama_cpp

    if qtype not in FILE_TYPES:
        raise EdgespecError(f"unknown GGUF type {qtype!r}; choose one of {', '.join(FILE_TYPES)}")
    if output_tensor_type is not None and output_tensor_type not in TENSOR_TYPES:
        raise EdgespecError(
            f"unknown output tensor type {output_tensor_type!r}; "
            f"choose one of {', '.join(TENSOR_TYPES)}"
        )
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, FILE_TYPES[qtype])
    params.nthread = threads or os.cpu_count() or 1
    params.allow_requantize = True
    if output_tensor_type:
        params.output_tensor_type = getattr(llama_cpp, TENSOR_TYPES[output_tensor_type])
    tmp = dst.with_name(dst.name + ".partial")
    status = llama_cpp.llama_model_quantize(
        str(src).encode(), str(tmp).encode(), ctypes.byref(params)
    )
    if status != 0:
        tmp.unlink(missing_ok=True)
        raise ModelFileError(f"llama.cpp could not quantize {src} to {qtype} (status {status})")
    tmp.replace(dst)
    return dst


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
