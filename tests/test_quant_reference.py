import numpy as np
import pytest

from edgespec.quant.reference import (
    TensorError,
    dequantize_int4_blocks,
    error_summary,
    fake_quantize,
    quantize_int4_blocks,
    relative_error,
    round_to_e4m3,
)


def test_e4m3_grid_points_and_rounding():
    exact = np.array([0.0, 1.0, 1.125, -1.75, 448.0, 2.0**-9, 240.0, 0.015625])
    np.testing.assert_array_equal(round_to_e4m3(exact), exact.astype(np.float32))
    assert round_to_e4m3(np.array([1.0625]))[0] == 1.0  # tie -> even mantissa
    assert round_to_e4m3(np.array([1.19]))[0] == 1.25
    assert round_to_e4m3(np.array([1000.0]))[0] == 448.0  # saturates
    assert round_to_e4m3(np.array([2.0**-11]))[0] == 0.0  # below half the smallest subnormal


def test_int4_blocks_round_trip_exactly_on_grid_values():
    scales = np.array([[0.5, 2.0]], np.float32)
    codes = np.array([[-7, 7, 0, 3, 1, -1, 7, -7]], np.int8)  # each block reaches +-7
    w = dequantize_int4_blocks(codes, scales)
    c2, s2 = quantize_int4_blocks(w, block=4)
    np.testing.assert_array_equal(dequantize_int4_blocks(c2, s2), w)


@pytest.mark.parametrize(
    "kind, bound", [("fp32", 0.0), ("fp16", 1e-3), ("fp8", 0.05), ("int4", 0.2)]
)
def test_relative_error_bounds_on_gaussian_weights(kind, bound):
    """Gaussian weights: fp16 keeps ~3 decimal digits, E4M3 ~2^-4 relative per value,
    symmetric int4 in blocks of 32 ~0.1-0.15 relative. Bounds hold with margin."""
    w = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    error = relative_error(w, fake_quantize(w, kind))
    assert error <= bound
    if kind in ("fp8", "int4"):
        assert error > bound / 10  # and the quantizer does something


def test_summary_names_the_worst_tensors_first():
    rng = np.random.default_rng(1)
    tensors = {
        "smooth": rng.standard_normal((8, 32)).astype(np.float32),
        # one large weight per block sets a coarse step for the 31 ordinary ones
        "outliers": np.where(np.arange(32) == 0, 10.0, rng.standard_normal((8, 32))).astype(
            np.float32
        ),
    }
    errors = [
        TensorError(name, w.shape, relative_error(w, fake_quantize(w, "int4")))
        for name, w in tensors.items()
    ]
    summary = error_summary(errors)
    assert summary is not None
    assert [name for name, _ in summary["worst"]] == ["outliers", "smooth"]
    assert summary["n_tensors"] == 2
    assert summary["mean"] == round(sum(e.relative_error for e in errors) / 2, 5)
    assert error_summary([]) is None
    with pytest.raises(ValueError, match="unknown quantization 'int3'"):
        fake_quantize(tensors["smooth"], "int3")


def test_error_sum_over_blocks_is_the_relative_error_of_the_whole():
    from edgespec.quant.reference import ErrorSum, relative_error

    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)
    stored = fake_quantize(w, "int4")
    whole = ErrorSum()
    whole.add(w, stored)
    old = float(np.linalg.norm(w - stored)) / float(np.linalg.norm(w))  # the formula before
    assert whole.value() == relative_error(w, stored) == old  # one block: the same figures
    blocks = ErrorSum()
    for i in range(0, 64, 10):
        blocks.add(w[i : i + 10], stored[i : i + 10])
    assert abs(blocks.value() - whole.value()) < 1e-6
    assert 0.05 < whole.value() < 0.2
