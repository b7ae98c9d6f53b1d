"""The compiled float->blob pass: bit-identical to quantize_rows + build_blob; steps aside when it must."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.errors import WeightsError
from libredgetpu_ros.matmul import MatMulEngine, fastpath
from libredgetpu_ros.matmul.blob import build_blob
from libredgetpu_ros.matmul.quantize import quantize_rows
from libredgetpu_ros.matmul.template import load_template
from libredgetpu_ros.matmul.twin import dense_uint8, exact_float_dtype

SIZES = (256, 512, 1024)


def _numpy_path(weights, template):
    quantized = quantize_rows(np.asarray(weights, dtype=np.float32), template.quant.weight_scales)
    return quantized, build_blob(quantized.values, template.overhead)


def _assert_same(fast, reference):
    (q_fast, blob_fast), (q_ref, blob_ref) = fast, reference
    assert np.array_equal(q_fast.values, q_ref.values)
    assert np.array_equal(blob_fast, blob_ref)
    assert np.array_equal(q_fast.row_error, q_ref.row_error)  # exact, not approx
    assert q_fast.max_quantization_error == q_ref.max_quantization_error
    assert q_fast.clipped_count == q_ref.clipped_count == 0 and q_fast.max_clip_error == q_ref.max_clip_error


def test_numba_kernel_is_available():
    # numba is pinned in requirements.lock.txt; without it every swap silently takes the slow path.
    assert fastpath.available()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bit_identical_to_numpy_path(n, dtype, fixture_path):
    template = load_template(fixture_path(f"matmul/dense_{n}_edgetpu.tflite"))
    scales = template.quant.weight_scales
    rng = np.random.default_rng(n)
    weights = rng.uniform(-127.4, 127.4, size=(n, n)) * scales[:, None]  # the edges of the range included
    weights = weights.astype(dtype)
    fast = fastpath.quantize_to_blob(weights, scales, template.overhead, n)
    assert fast is not None
    _assert_same(fast, _numpy_path(weights, template))


def test_round_half_to_even_ties_are_identical(fixture_path):
    template = load_template(fixture_path("matmul/dense_256_edgetpu.tflite"))
    scales = template.quant.weight_scales
    inv = (1.0 / scales.astype(np.float64)).astype(np.float32)
    rng = np.random.default_rng(7)
    k = rng.integers(-128, 127, size=(256, 256)).astype(np.float32) + np.float32(0.5)
    # Nudge each candidate by -2..2 ulps so that many products land exactly on .5 after float32 rounding.
    weights = (k / inv[:, None]).astype(np.float32)
    weights = np.nextafter(weights, np.inf * np.sign(rng.uniform(-1, 1, weights.shape)).astype(np.float32))
    scaled = weights * inv[:, None]
    ties = np.count_nonzero(scaled - np.floor(scaled) == 0.5)
    assert ties > 1000  # the test really exercises ties
    fast = fastpath.quantize_to_blob(weights, scales, template.overhead, 256)
    assert fast is not None
    _assert_same(fast, _numpy_path(weights, template))


def test_template_weights_round_trip_to_the_compiled_bytes(fixture_path):
    # Dequantized template weights re-quantize into edgetpu_compiler's own parameter bytes (the error left is
    # float32 rounding of q * s * (1 / s), a few ulps of q).
    template = load_template(fixture_path("matmul/dense_1024_edgetpu.tflite"))
    weights = template.weights.astype(np.float32) * template.quant.weight_scales[:, None]
    scales = template.quant.weight_scales
    quantized, blob = fastpath.quantize_to_blob(weights, scales, template.overhead, 1024)
    assert np.array_equal(quantized.values, template.weights)
    assert quantized.max_quantization_error <= 1e-5 * float(template.quant.weight_scales.max())
    assert np.array_equal(blob, template.compiled_parameters())
    _assert_same((quantized, blob), _numpy_path(weights, template))


@pytest.mark.parametrize("case", ["clipped", "nan", "inf", "int64", "strided", "shape"])
def test_steps_aside_for_the_exact_path(case, fixture_path):
    template = load_template(fixture_path("matmul/dense_256_edgetpu.tflite"))
    scales = template.quant.weight_scales
    weights = np.random.default_rng(1).uniform(-100, 100, (256, 256)).astype(np.float32) * scales[:, None]
    if case == "clipped":
        weights[200, 3] = 200 * scales[200]
    elif case == "nan":
        weights[5, 7] = np.nan
    elif case == "inf":
        weights[255, 255] = -np.inf
    elif case == "int64":
        weights = np.zeros((256, 256), dtype=np.int64)
    elif case == "strided":
        weights = np.asfortranarray(weights)
    else:
        weights = weights[:, :128]
    assert fastpath.quantize_to_blob(weights, scales, template.overhead, 256) is None


def test_engine_reports_match_either_path(fixture_path):
    path = fixture_path("matmul/dense_256_edgetpu.tflite")
    with MatMulEngine.from_template(path, backend="cpu") as engine:
        scales = engine.quantization.weight_scales
        weights = np.random.default_rng(2).uniform(-120, 120, (256, 256)) * scales[:, None]
        fast = engine.set_weights(weights)
        fast_blob, _ = engine.current_blob()
        clipped = weights.copy()
        clipped[0, 0] = 1e3  # forces the NumPy path for the same matrix plus one clipped entry
        slow = engine.set_weights(clipped)
        slow_blob, _ = engine.current_blob()
        assert slow.clipped_count == 1 and fast.clipped_count == 0
        assert np.array_equal(np.delete(fast_blob, [512]), np.delete(slow_blob, [512]))  # only (0, 0) differs
        assert fast.timings_ms["quantize"] > 0.0
        with pytest.raises(WeightsError, match="NaN"):
            engine.set_weights(np.full((256, 256), np.nan))
        assert engine.version == 2


@pytest.mark.parametrize("n", SIZES)
def test_float32_twin_is_exact_up_to_the_largest_sums(n, fixture_path):
    # float32 BLAS holds every partial sum exactly when |sum| <= 2**24: the extreme matrices reach it at 1024.
    template = load_template(fixture_path(f"matmul/dense_{n}_edgetpu.tflite"))
    quant = template.quant
    assert exact_float_dtype(n, quant.input_zero_point) is np.float32
    assert exact_float_dtype(2048, quant.input_zero_point) is np.float64
    rng = np.random.default_rng(n)
    weights = np.vstack([np.full((1, n), -128), np.full((1, n), 127),
                         rng.integers(-128, 128, (n - 2, n))]).astype(np.int8)
    xq = np.vstack([np.zeros((1, n)), np.full((1, n), 255), rng.integers(0, 256, (6, n))]).astype(np.uint8)
    as64 = dense_uint8(weights.astype(np.float64), xq, quant)
    assert np.array_equal(dense_uint8(weights.astype(np.float32), xq, quant), as64)
    assert np.array_equal(dense_uint8(weights, xq, quant), as64)
    acc = (xq.astype(np.int64) - quant.input_zero_point) @ weights.T.astype(np.int64)
    assert np.abs(acc).max() >= n * 127 * 127  # the extremes really were exercised


@pytest.mark.parametrize("n", SIZES)
def test_twin_matmul_kernel_is_the_numpy_twin_bit_for_bit(n, fixture_path):
    from libredgetpu_ros.matmul.twin import dequantize, quantize_input

    template = load_template(fixture_path(f"matmul/dense_{n}_edgetpu.tflite"))
    quant = template.quant
    rng = np.random.default_rng(n + 1)
    weights = rng.integers(-128, 128, (n, n)).astype(np.int8)
    lo, hi = quant.input_range()
    # Inputs on exact half steps (rounding ties), beyond the input range (clipping) and random ones.
    ties = (rng.integers(-120, 120, (3, n)) + 0.5) * quant.input_scale
    x = np.vstack([rng.uniform(lo, hi, (4, n)), ties, np.full((1, n), 3.0 * hi), np.full((1, n), 3.0 * lo)])
    reference = dequantize(dense_uint8(weights.astype(np.float64), quantize_input(x, quant), quant),
                           quant.output_scale, quant.output_zero_point)
    y = fastpath.twin_matmul(x, weights, quant.input_scale, quant.input_zero_point, quant.multipliers(),
                             quant.output_zero_point, quant.output_scale)
    assert y.dtype == np.float32 and np.array_equal(y, reference)
    assert np.array_equal(fastpath.twin_matmul(x.astype(np.float32), weights, quant.input_scale,
                                               quant.input_zero_point, quant.multipliers(),
                                               quant.output_zero_point, quant.output_scale),
                          dequantize(dense_uint8(weights, quantize_input(x.astype(np.float32), quant), quant),
                                     quant.output_scale, quant.output_zero_point))
