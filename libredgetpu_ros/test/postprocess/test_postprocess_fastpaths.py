"""The fast paths of the DeepLab tail equal their reference paths: fixed-point requantization (vs scalar
transcriptions of TFLite's and ruy's integer code), float32 accumulator requantization and the compiled
requantization kernel (vs the integer path), and the cell-wise fused resize + argmax, NumPy and compiled
(vs upsampling every channel)."""

from __future__ import annotations

from fractions import Fraction
from math import floor

import cv2
import numpy as np
import pytest
from libredgetpu_ros.postprocess import kernels
from libredgetpu_ros.postprocess.qops import (
    AccumulatorRequantizer,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
)
from libredgetpu_ros.postprocess.resize import UpsampleArgmax, resize_bilinear, resize_bilinear_argmax

from libredgetpu_ros import jit

needs_numba = pytest.mark.skipif(not jit.available(), reason="numba is not installed")

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def _tflite_scalar(x: int, multiplier: int, shift: int) -> int:
    """TFLite's MultiplyByQuantizedMultiplier, line by line on Python ints (gemmlowp semantics)."""
    left, right = max(shift, 0), max(-shift, 0)
    a = x * (1 << left)
    if a == multiplier == INT32_MIN:
        return INT32_MAX
    ab = a * multiplier
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    num = ab + nudge
    high = abs(num) // (1 << 31) * (1 if num >= 0 else -1)  # C++ division truncates toward zero
    mask = (1 << right) - 1
    remainder = high & mask
    threshold = (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if remainder > threshold else 0)


def _ruy_scalar(x: int, multiplier: int, shift: int) -> int:
    """ruy's requantization on Python ints: the doubling high product rounded half up, then the right shift
    rounded half up (ties toward +inf, negatives included), each as exact rational arithmetic."""
    left, right = max(shift, 0), max(-shift, 0)
    high = floor(Fraction(x * (1 << left) * multiplier, 1 << 31) + Fraction(1, 2))
    return floor(Fraction(high, 1 << right) + Fraction(1, 2)) if right else high


@pytest.mark.parametrize("half_up", [False, True])
def test_multiply_by_quantized_multiplier_matches_tflite_integer_code(half_up):
    rng = np.random.default_rng(0)
    scalar = _ruy_scalar if half_up else _tflite_scalar
    for real in (0.9, 0.5, 0.3, 1.0 / 3.0, 0.012, 1.3e-3, 2.2e-5, 1.7):
        multiplier, shift = quantize_multiplier(real)
        x = np.concatenate([np.arange(-300, 300), rng.integers(-(1 << 24), 1 << 24, size=2000)])
        if shift > 0:
            x //= 1 << shift
        ours = multiply_by_quantized_multiplier(x, multiplier, shift, half_up)
        expected = [scalar(int(v), multiplier, shift) for v in x]
        np.testing.assert_array_equal(ours, expected, err_msg=f"real {real}")
    # The two differ exactly on negative halves: -2560 * 2^-10 = -2.5 (a DeepLab logit, multiplier 0.539..)
    multiplier, shift = 1158752855, -10
    assert _tflite_scalar(-4744, multiplier, shift) == -3 and _ruy_scalar(-4744, multiplier, shift) == -2
    assert multiply_by_quantized_multiplier(np.array([-4744]), multiplier, shift, half_up)[0] == (
        -2 if half_up else -3)


def _planted_accumulators(seed: int):
    """Per-channel multipliers, a zero point, per-pixel and constant partial sums and a bias, with 200
    accumulators planted exactly on rounding halves of either sign (where the roundings differ)."""
    rng = np.random.default_rng(seed)
    channels = 64
    pairs = [quantize_multiplier(r) for r in rng.uniform(2e-4, 0.7, size=channels)]
    multiplier = np.array([m for m, _ in pairs])
    shift = np.array([s for _, s in pairs])
    zero_point = int(rng.integers(0, 256))
    per_pixel = rng.integers(-(1 << 20), 1 << 20, size=(500, channels)).astype(np.float32)
    constant = rng.integers(-(1 << 18), 1 << 18, size=(1, channels)).astype(np.float32)
    # Plant accumulators exactly on rounding halves (the band the float path must hand to the exact path).
    rows = rng.integers(0, 500, size=200)
    cols = rng.integers(0, channels, size=200)
    bias = rng.integers(-5000, 5000, size=channels)
    for r, c in zip(rows, cols, strict=True):
        step = 2 ** (31 - int(shift[c]))  # acc * M / step = k + 0.5  <=>  acc = (k + 0.5) * step / M
        k = int(rng.integers(-zero_point - 2, 258 - zero_point))
        per_pixel[r, c] = round((k + 0.5) * step / int(multiplier[c])) - constant[0, c] - bias[c]
    return multiplier, shift, zero_point, per_pixel, constant, bias


@pytest.mark.parametrize("half_up", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_accumulator_requantizer_equals_integer_path(seed, half_up):
    multiplier, shift, zero_point, per_pixel, constant, bias = _planted_accumulators(seed)
    low, high = 0, 255
    requantize = AccumulatorRequantizer(multiplier, shift, zero_point, low, high, np.dtype(np.uint8), half_up)
    ours = requantize([constant, per_pixel], bias)
    acc = per_pixel.astype(np.int64) + constant.astype(np.int64) + bias
    exact = np.clip(multiply_by_quantized_multiplier(acc, multiplier, shift, half_up) + zero_point, low, high)
    np.testing.assert_array_equal(ours, exact.astype(np.uint8))


@needs_numba
@pytest.mark.parametrize("half_up", [False, True])
@pytest.mark.parametrize(("seed", "dtype", "low", "high"), [(0, np.uint8, 0, 255), (1, np.uint8, 3, 200),
                                                            (2, np.int8, -128, 127)])
def test_compiled_requantize_equals_integer_path(seed, dtype, low, high, half_up):
    multiplier, shift, zero_point, per_pixel, constant, bias = _planted_accumulators(seed)
    zero_point += int(np.iinfo(dtype).min)
    offset = constant[0].astype(np.int64) + bias
    out = np.empty(per_pixel.shape, dtype)
    kernel = kernels.requantize_kernel(np.dtype(dtype))
    kernel(per_pixel, offset, *kernels.shift_params(multiplier, shift, half_up), zero_point, low, high, out)
    acc = per_pixel.astype(np.int64) + offset
    exact = np.clip(multiply_by_quantized_multiplier(acc, multiplier, shift, half_up) + zero_point, low, high)
    np.testing.assert_array_equal(out, exact.astype(dtype))


def _smooth_logits(rng, h, w, classes):
    """Class score maps with large uniform regions, boundaries and exact ties, like segmentation logits."""
    coarse = rng.integers(0, 256, size=(max(h // 4, 1), max(w // 4, 1), classes)).astype(np.float32)
    logits = cv2.resize(coarse, (w, h), interpolation=cv2.INTER_LINEAR).reshape(h, w, classes)
    logits = np.clip(np.rint(logits), 0, 255).astype(np.uint8)
    tie = rng.random((h, w)) < 0.05
    logits[tie, 1] = logits[tie, 0]
    return logits


RESIZE_CASES = [
    (33, 33, 513, 513, True, False),  # DeepLabV3 513
    (17, 23, 257, 353, True, False),
    (33, 33, 512, 500, False, False),
    (16, 20, 64, 80, False, True),
    (21, 13, 100, 71, False, True),
    (9, 9, 9, 40, True, False),
]


@pytest.mark.parametrize(("h", "w", "out_h", "out_w", "align", "half"), RESIZE_CASES)
def test_fused_resize_argmax_equals_full_resize(h, w, out_h, out_w, align, half):
    rng = np.random.default_rng(h * 1000 + out_w)
    for classes in (2, 21):
        logits = _smooth_logits(rng, h, w, classes)
        full = resize_bilinear(logits, out_h, out_w, align, half)
        fused = resize_bilinear_argmax(logits, out_h, out_w, align, half)
        assert fused.dtype == np.uint8
        np.testing.assert_array_equal(fused, np.argmax(full, axis=-1))


@needs_numba
@pytest.mark.parametrize(("h", "w", "out_h", "out_w", "align", "half"), RESIZE_CASES)
def test_compiled_upsample_argmax_equals_full_resize(h, w, out_h, out_w, align, half):
    """The compiled cell kernel (``UpsampleArgmax`` on uint8) gives the class map of the full upsample."""
    upsample = UpsampleArgmax(h, w, out_h, out_w, align, half)
    assert upsample.compiled
    rng = np.random.default_rng(h * 1000 + out_w)
    for classes in (2, 21):
        logits = _smooth_logits(rng, h, w, classes)
        fused = upsample(logits)
        assert fused.dtype == np.uint8 and fused.shape == (out_h, out_w)
        full = resize_bilinear(logits, out_h, out_w, align, half)
        np.testing.assert_array_equal(fused, np.argmax(full, axis=-1))
    with pytest.raises(ValueError, match="inputs"):
        upsample(np.zeros((h + 1, w, 2), np.uint8))


def test_resize_bilinear_kernel_arithmetic():
    """Known values: align_corners 2 -> 3 puts the middle sample at the mean, rounded half up (+0.5 then
    truncation); half-pixel centres clamp outside samples to the edge."""
    image = np.array([[[10], [13]]], dtype=np.uint8).repeat(2, axis=0)
    np.testing.assert_array_equal(resize_bilinear(image, 2, 3, True, False)[0, :, 0], [10, 12, 13])
    np.testing.assert_array_equal(resize_bilinear(image, 2, 4, False, True)[0, :, 0], [10, 11, 12, 13])
    floats = image.astype(np.float32)
    np.testing.assert_allclose(resize_bilinear(floats, 2, 3, True, False)[0, :, 0], [10, 11.5, 13])
