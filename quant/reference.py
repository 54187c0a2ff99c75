"""Numpy reference quantizers and the weight-error summary `export` stores in bundle.json.

INT4: symmetric blocks along the input dimension (32 or 128 weights share one float scale),
as ONNX Runtime's MatMulNBits and llama.cpp's Q4_0 store them. FP8: E4M3 (max 448) with one
scale per output channel, as TensorRT consumes it. Both return the dequantized float32 array,
so the error of a choice can be measured before any back-end runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FP8_E4M3_MAX = 448.0


def quantize_int4_blocks(w: np.ndarray, block: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """[out, in] float -> (codes [out, in] int8 in -8..7, scales [out, in/block] float32)."""
    out_dim, in_dim = w.shape
    if in_dim % block:
        raise ValueError(f"input dimension {in_dim} is not a multiple of the block size {block}")
    blocks = w.reshape(out_dim, in_dim // block, block).astype(np.float32)
    scales = np.abs(blocks).max(axis=-1) / 7.0
    safe = np.where(scales == 0, 1.0, scales)[..., None]
    codes = np.clip(np.round(blocks / safe), -8, 7).astype(np.int8)
    return codes.reshape(out_dim, in_dim), scales.astype(np.float32)


def dequantize_int4_blocks(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    out_dim, in_dim = codes.shape
    block = in_dim // scales.shape[1]
    blocks = codes.reshape(out_dim, -1, block).astype(np.float32) * scales[..., None]
    return blocks.reshape(out_dim, in_dim)


def round_to_e4m3(x: np.ndarray) -> np.ndarray:
    """Nearest FP8 E4M3 value (ties to even), saturating at +-448, as float32."""
    x = np.asarray(x, dtype=np.float32)
    mag = np.minimum(np.abs(x), FP8_E4M3_MAX)
    exponent = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    exponent = np.maximum(exponent, -6.0)  # below 2^-6 the format is subnormal: fixed step
    step = np.exp2(exponent - 3.0)  # 3 mantissa bits
    rounded = np.minimum(np.round(mag / step) * step, FP8_E4M3_MAX)
    return (np.sign(x) * rounded).astype(np.float32)


def quantize_fp8_per_channel(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[out, in] float -> (E4M3 values as float32 [out, in], scales [out] float32)."""
    scales = np.abs(w).max(axis=1).astype(np.float32) / FP8_E4M3_MAX
    safe = np.where(scales == 0, 1.0, scales)[:, None]
    return round_to_e4m3(w / safe), scales


def dequantize_fp8_per_channel(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    return (values * scales[:, None]).astype(np.float32)


def fake_quantize(w: np.ndarray, kind: str, block: int = 32) -> np.ndarray:
    """w as it comes back from quantizing with `kind` (int4 | fp8 | fp16 | fp32)."""
    if kind == "int4":
        return dequantize_int4_blocks(*quantize_int4_blocks(w, block))
    if kind == "fp8":
        return dequantize_fp8_per_channel(*quantize_fp8_per_channel(w))
    if kind == "fp16":
        return w.astype(np.float16).astype(np.float32)
    if kind == "fp32":
        return w.astype(np.float32)
    raise ValueError(f"unknown quantization {kind!r}; choose int4, fp8, fp16 or fp32")


@dataclass(frozen=True)
class TensorError:
    name: str
    shape: tuple[int, ...]
    relative_error: float  # ||w - q(w)|| / ||w||, Frobenius


def relative_error(w: np.ndarray, stored: np.ndarray) -> float:
    """||w - stored|| / ||w|| (Frobenius)."""
    errors = ErrorSum()
    errors.add(w, stored)
    return errors.value()


class ErrorSum:
    """relative_error over a weight quantized a block at a time: the squared norms add up.
    One block gives exactly np.linalg.norm's figures (the same float32 dot products)."""

    def __init__(self) -> None:
        self.w2 = np.float32(0.0)  # sum of w^2
        self.d2 = np.float32(0.0)  # sum of (w - stored)^2

    def add(self, w: np.ndarray, stored: np.ndarray) -> None:
        x = np.asarray(w, np.float32).ravel(order="K")
        d = np.asarray(w - stored, np.float32).ravel(order="K")
        self.w2 += x.dot(x)
        self.d2 += d.dot(d)

    def value(self) -> float:
        norm = float(np.sqrt(self.w2))
        return float(np.sqrt(self.d2)) / norm if norm else 0.0


def error_summary(errors: list[TensorError]) -> dict | None:
    """Mean and worst five relative errors: what `export` prints and bundle.json keeps."""
    if not errors:
        return None
    worst = sorted(errors, key=lambda e: -e.relative_error)
    return {
        "n_tensors": len(errors),
        "mean": round(sum(e.relative_error for e in errors) / len(errors), 5),
        "worst": [[e.name, round(e.relative_error, 5)] for e in worst[:5]],
    }
