"""The fast paths of the DeepLab tail equal their reference paths: fixed-point requantization (vs a scalar
transcription of TFLite's integer code), float32 accumulator requantization (vs the integer path) and the
cell-wise fused resize + argmax (vs upsampling every channel)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from libredgetpu_ros.postprocess.qops import (
    AccumulatorRequantizer,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
)
from libredgetpu_ros.postprocess.resize import resize_bilinear, resize_bilinear_argmax

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


def test_multiply_by_quantized_multiplier_matches_tflite_integer_code():
    rng = np.random.default_rng(0)
    for real in (0.9, 0.5, 0.3, 1.0 / 3.0, 0.012, 1.3e-3, 2.2e-5, 1.7):
        multiplier, shift = quantize_multiplier(real)
        x = np.concatenate([np.arange(-300, 300), rng.integers(-(1 << 24), 1 << 24, size=2000)])
        if shift > 0:
            x //= 1 << shift
        ours = multiply_by_quantized_multiplier(x, multiplier, shift)
        expected = [_tflite_scalar(int(v), multiplier, shift) for v in x]
        np.testing.assert_array_equal(ours, expected, err_msg=f"real {real}")


@pytest.mark.parametrize("seed", range(3))
def test_accumulator_requantizer_equals_integer_path(seed):
    rng = np.random.default_rng(seed)
    channels = 64
    pairs = [quantize_multiplier(r) for r in rng.uniform(2e-4, 0.7, size=channels)]
    multiplier = np.array([m for m, _ in pairs])
    shift = np.array([s for _, s in pairs])
    zero_point, low, high = int(rng.integers(0, 256)), 0, 255
    requantize = AccumulatorRequantizer(multiplier, shift, zero_point, low, high, np.dtype(np.uint8))
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
    ours = requantize([constant, per_pixel], bias)
    acc = per_pixel.astype(np.int64) + constant.astype(np.int64) + bias
    exact = np.clip(multiply_by_quantized_multiplier(acc, multiplier, shift) + zero_point, low, high)
    np.testing.assert_array_equal(ours, exact.astype(np.uint8))


def _smooth_logits(rng, h, w, classes):
    """Class score maps with large uniform regions, boundaries and exact ties, like segmentation logits."""
    coarse = rng.integers(0, 256, size=(max(h // 4, 1), max(w // 4, 1), classes)).astype(np.float32)
    logits = cv2.resize(coarse, (w, h), interpolation=cv2.INTER_LINEAR).reshape(h, w, classes)
    logits = np.clip(np.rint(logits), 0, 255).astype(np.uint8)
    tie = rng.random((h, w)) < 0.05
    logits[tie, 1] = logits[tie, 0]
    return logits


@pytest.mark.parametrize(("h", "w", "out_h", "out_w", "align", "half"), [
    (33, 33, 513, 513, True, False),  # DeepLabV3 513
    (17, 23, 257, 353, True, False),
    (33, 33, 512, 500, False, False),
    (16, 20, 64, 80, False, True),
    (21, 13, 100, 71, False, True),
    (9, 9, 9, 40, True, False),
])
def test_fused_resize_argmax_equals_full_resize(h, w, out_h, out_w, align, half):
    rng = np.random.default_rng(h * 1000 + out_w)
    for classes in (2, 21):
        logits = _smooth_logits(rng, h, w, classes)
        full = resize_bilinear(logits, out_h, out_w, align, half)
        fused = resize_bilinear_argmax(logits, out_h, out_w, align, half)
        assert fused.dtype == np.uint8
        np.testing.assert_array_equal(fused, np.argmax(full, axis=-1))


def test_resize_bilinear_kernel_arithmetic():
    """Known values: align_corners 2 -> 3 puts the middle sample at the mean, rounded half up (+0.5 then
    truncation); half-pixel centres clamp outside samples to the edge."""
    image = np.array([[[10], [13]]], dtype=np.uint8).repeat(2, axis=0)
    np.testing.assert_array_equal(resize_bilinear(image, 2, 3, True, False)[0, :, 0], [10, 12, 13])
    np.testing.assert_array_equal(resize_bilinear(image, 2, 4, False, True)[0, :, 0], [10, 11, 12, 13])
    floats = image.astype(np.float32)
    np.testing.assert_allclose(resize_bilinear(floats, 2, 3, True, False)[0, :, 0], [10, 11.5, 13])
