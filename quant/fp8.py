"""FP8 E4M3 weights with one scale per output channel, as bytes an ONNX float8e4m3fn tensor holds.

quant.reference rounds to the E4M3 grid (and measures the error); this module turns those
values into the format's bit patterns, so an exporter can store 1 byte per weight and let
DequantizeLinear (opset 19+) restore values * scale. E4M3FN: 1 sign, 4 exponent (bias 7),
3 mantissa bits, no infinities, max 448; exponent field 0 holds the subnormals (step 2^-9).
"""

from __future__ import annotations

import numpy as np

from edgespec.quant.reference import FP8_E4M3_MAX, round_to_e4m3

E4M3_BIAS = 7


def encode_e4m3(values: np.ndarray) -> np.ndarray:
    """Values already on the E4M3 grid (|v| <= 448) -> their bit patterns, uint8 same shape."""
    v = np.asarray(values, dtype=np.float32)
    sign = np.signbit(v).astype(np.uint8) << 7
    mag = np.abs(v).astype(np.float64)
    if (mag > FP8_E4M3_MAX).any():
        raise ValueError(f"value {mag.max()} is outside E4M3's range (max {FP8_E4M3_MAX})")
    exponent = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    normal = exponent >= 1 - E4M3_BIAS  # 2^-6 and above
    # normal: mag = 2^e * (1 + m/8); subnormal: mag = m * 2^-9
    e_field = np.where(normal, exponent + E4M3_BIAS, 0)
    m_field = np.where(normal, mag / np.exp2(exponent) * 8 - 8, mag * 2.0**9)
    m_round = np.round(m_field)
    if not np.array_equal(m_round, m_field):
        raise ValueError("values are not on the E4M3 grid; round them with round_to_e4m3 first")
    bits = (e_field.astype(np.uint8) << 3) | m_round.astype(np.uint8)
    return sign | np.where(mag > 0, bits, 0).astype(np.uint8)


def decode_e4m3(bits: np.ndarray) -> np.ndarray:
    """Bit patterns (uint8) -> float32 values; 0x7F/0xFF (NaN) are not produced by encode."""
    b = np.asarray(bits, dtype=np.uint8)
    e_field = ((b >> 3) & 0xF).astype(np.float32)
    m_field = (b & 0x7).astype(np.float32)
    mag = np.where(e_field > 0, np.exp2(e_field - E4M3_BIAS) * (1 + m_field / 8), m_field * 2.0**-9)
    return np.where(b & 0x80, -mag, mag).astype(np.float32)


def quantize_fp8(w: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel E4M3: w float -> (bits uint8 same shape, scales float32 [w.shape[axis]]).

    The largest |w| of each channel along `axis` maps to 448; dequantized w = value(bits) * scale,
    which is exactly quant.reference.fake_quantize(w, "fp8") for axis 0 of an [out, in] matrix.
    """
    w = np.asarray(w, dtype=np.float32)
    other = tuple(i for i in range(w.ndim) if i != axis % w.ndim)
    scales = (np.abs(w).max(axis=other) / FP8_E4M3_MAX).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    safe = np.where(scales == 0, 1.0, scales).reshape(shape)
    return encode_e4m3(round_to_e4m3(w / safe)), scales


def dequantize_fp8(bits: np.ndarray, scales: np.ndarray, axis: int = 0) -> np.ndarray:
    shape = [1] * bits.ndim
    shape[axis] = -1
    return (decode_e4m3(bits) * scales.reshape(shape)).astype(np.float32)
