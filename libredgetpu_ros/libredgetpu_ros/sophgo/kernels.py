"""Vectorised NumPy kernels behind the executor: convolution, pooling, matmul and the rounding modes.

Integer convolutions and matmuls run in float64 BLAS when every partial sum is an integer below 2**53
(exact), else in int64. Windows come from one strided view of the padded input; the loops are over kernel
taps or groups, never over pixels.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

_EXACT_F64 = 2.0 ** 53


def round_float(x: np.ndarray, mode: str) -> np.ndarray:
    """Round a float array with one of tpu-mlir's round modes (ties decided on the exact value)."""
    if mode == "HalfToEven":
        return np.rint(x)
    if mode == "TowardsZero":
        return np.trunc(x)
    if mode == "Down":
        return np.floor(x)
    if mode == "Up":
        return np.ceil(x)
    floor = np.floor(x)
    frac = x - floor  # exact for doubles
    if mode == "HalfUp":
        return np.where(frac >= 0.5, floor + 1, floor)
    if mode == "HalfDown":
        return np.where(frac > 0.5, floor + 1, floor)
    if mode == "HalfAwayFromZero":
        return np.where((frac > 0.5) | ((frac == 0.5) & (x > 0)), floor + 1, floor)
    if mode == "HalfTowardsZero":
        return np.where((frac > 0.5) | ((frac == 0.5) & (x < 0)), floor + 1, floor)
    if mode == "HalfToOdd":
        up = (frac > 0.5) | ((frac == 0.5) & (np.mod(floor, 2) == 0))
        return np.where(up, floor + 1, floor)
    raise ValueError(f"unknown round mode {mode!r}")


def round_div(a: np.ndarray, b: np.ndarray | int, mode: str) -> np.ndarray:
    """``round(a / b)`` for int64 ``a`` and positive int ``b``, exactly, with a tpu-mlir round mode."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    q, r = np.divmod(a, b)  # floor division: 0 <= r < b
    twice = 2 * r
    if mode == "Down":
        return q
    if mode == "Up":
        return q + (r > 0)
    if mode == "TowardsZero":
        return q + ((r > 0) & (a < 0))
    above, tie = twice > b, twice == b
    if mode == "HalfAwayFromZero":
        return q + (above | (tie & (a >= 0)))
    if mode == "HalfTowardsZero":
        return q + (above | (tie & (a < 0)))
    if mode == "HalfUp":
        return q + (above | tie)
    if mode == "HalfDown":
        return q + above
    if mode == "HalfToEven":
        return q + (above | (tie & (q % 2 == 1)))
    if mode == "HalfToOdd":
        return q + (above | (tie & (q % 2 == 0)))
    raise ValueError(f"unknown round mode {mode!r}")


def saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(values, info.min, info.max).astype(dtype)


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: list[int], dilation: list[int],
             out_hw: tuple[int, int]) -> np.ndarray:
    """(n, c, oh, ow, kh, kw) strided view of an already padded NCHW array."""
    kh, kw = kernel
    extent = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    view = sliding_window_view(x, extent, axis=(2, 3))
    view = view[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]
    return view[:, :, :out_hw[0], :out_hw[1]]


def _pad(x: np.ndarray, pads: list[int], value: float | int = 0) -> np.ndarray:
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=value)


def conv2d(x: np.ndarray, w: np.ndarray, stride: list[int], dilation: list[int], pads: list[int], group: int,
           out_hw: tuple[int, int]) -> np.ndarray:
    """NCHW convolution of float or integer-valued arrays; the result has x's (float) dtype."""
    n, c = x.shape[:2]
    oc, icg, kh, kw = w.shape
    win = _windows(_pad(x, pads), (kh, kw), stride, dilation, out_hw)
    oh, ow = out_hw
    if icg == 1 and oc == group == c:  # depthwise: one multiply-add per kernel tap
        out = np.zeros((n, c, oh, ow), dtype=np.result_type(x, w))
        for i in range(kh):
            for j in range(kw):
                out += win[..., i, j] * w[None, :, 0, i, j, None, None]
        return out
    ocg = oc // group
    out = np.empty((n, oc, oh, ow), dtype=np.result_type(x, w))
    for g in range(group):
        cols = win[:, g * icg:(g + 1) * icg].transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, icg * kh * kw)
        wg = w[g * ocg:(g + 1) * ocg].reshape(ocg, icg * kh * kw)
        out[:, g * ocg:(g + 1) * ocg] = (cols @ wg.T).reshape(n, oh, ow, ocg).transpose(0, 3, 1, 2)
    return out


def _shift_bound(x: np.ndarray, zero_point: np.ndarray | int) -> int:
    """Largest possible |x - zero_point| for x's integer dtype (no pass over the data)."""
    info = np.iinfo(x.dtype)
    zp = np.asarray(zero_point, dtype=np.int64)
    return int(max(info.max - zp.min(initial=0), zp.max(initial=0) - info.min))


def _shifted(x: np.ndarray, zero_point: np.ndarray | int, dtype: type) -> np.ndarray:
    out = x.astype(dtype)
    if np.any(zero_point):
        out -= np.asarray(zero_point, dtype=dtype)
    return out


def _exact_dtype(a: np.ndarray, zp_a: np.ndarray | int, b: np.ndarray, zp_b: np.ndarray | int,
                 terms: int) -> type:
    """float64 when every partial sum of ``terms`` products is an integer below 2**53, else int64."""
    bound = float(_shift_bound(a, zp_a)) * float(_shift_bound(b, zp_b)) * terms
    return np.float64 if bound < _EXACT_F64 else np.int64


def conv2d_int(x: np.ndarray, zp_x: np.ndarray | int, w: np.ndarray, zp_w: np.ndarray | int,
               stride: list[int], dilation: list[int], pads: list[int], group: int,
               out_hw: tuple[int, int]) -> np.ndarray:
    """Exact int64 ``conv(x - zp_x, w - zp_w)`` of raw integer arrays; padding reads as the zero point."""
    dtype = _exact_dtype(x, zp_x, w, zp_w, w.shape[1] * w.shape[2] * w.shape[3])
    out = conv2d(_shifted(x, zp_x, dtype), _shifted(w, zp_w, dtype), stride, dilation, pads, group, out_hw)
    return out.astype(np.int64)


def matmul_int(a: np.ndarray, zp_a: np.ndarray | int, b: np.ndarray, zp_b: np.ndarray | int) -> np.ndarray:
    """Exact int64 ``(a - zp_a) @ (b - zp_b)`` of raw integer arrays (float64 BLAS when exact)."""
    dtype = _exact_dtype(a, zp_a, b, zp_b, a.shape[-1])
    return np.matmul(_shifted(a, zp_a, dtype), _shifted(b, zp_b, dtype)).astype(np.int64)


def pool_taps(x: np.ndarray, kernel: list[int], stride: list[int], pads: list[int],
              ceil_extra: tuple[int, int], out_hw: tuple[int, int], pad_value: float | int,
              reduce: str) -> np.ndarray:
    """Max or sum over each window; ``ceil_extra`` pads the bottom/right further for ceil_mode."""
    padded = _pad(x, [pads[0], pads[1], pads[2] + ceil_extra[0], pads[3] + ceil_extra[1]], pad_value)
    win = _windows(padded, (kernel[0], kernel[1]), stride, [1, 1], out_hw)
    acc = win[..., 0, 0].copy()
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            if i or j:
                tap = win[..., i, j]
                if reduce == "max":
                    np.maximum(acc, tap, out=acc)
                else:
                    acc += tap
    return acc


def pool_counts(shape_hw: tuple[int, int], kernel: list[int], stride: list[int], pads: list[int],
                ceil_extra: tuple[int, int], out_hw: tuple[int, int], include_pad: bool) -> np.ndarray:
    """Cells counted by each average-pool window: real cells, plus every pad if ``include_pad``.

    The ceil_mode padding counts like the explicit pads: tpu-mlir's shape inference turns it into ordinary
    pads before anything runs."""
    h, w = shape_hw
    ones = np.ones((1, 1, h, w), dtype=np.int64)
    if include_pad:
        ones = _pad(ones, [pads[0], pads[1], pads[2] + ceil_extra[0], pads[3] + ceil_extra[1]], 1)
        pads, ceil_extra = [0, 0, 0, 0], (0, 0)
    return pool_taps(ones, kernel, stride, pads, ceil_extra, out_hw, 0, "sum")[0, 0]


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's ``QuantizeMultiplier`` as tpu-mlir 1.30.2 ports it (``MathUtils.cpp``): ``real ~ m * 2**(shift
    - 31)`` with ``m`` in [2**30, 2**31), shift clamped to [-31, 30] (below: 0, 0; above: 2**31 - 1, 30)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    fixed = math.floor(abs(q) * (1 << 31) + 0.5) * (1 if q > 0 else -1)  # std::round: half away from zero
    if fixed == 1 << 31:
        fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        return (1 << 31) - 1, 30
    return fixed, shift


def multiply_by_quantized_multiplier(acc: np.ndarray, multiplier: np.ndarray, shift: np.ndarray,
                                     mode: str) -> np.ndarray:
    """tpu-mlir's ``MultiplyByQuantizedMultiplier`` (requant mode ``TFLite_LShift``), which its bm1684x
    simulator computes too: left shift, ``(v * m) >> 31`` rounded half up, int32 saturation, then the right
    shift ``-shift`` rounded with ``mode``. The left shift runs in 64 bits and saturates to int32 (tpu-mlir
    shifts an int32 in C, undefined on overflow: an effective scale >= 1 with huge accumulators)."""
    v = np.asarray(acc, dtype=np.int64)
    left = np.maximum(shift, 0)
    v = np.clip(v << left, -(1 << 31), (1 << 31) - 1)
    v = round_div(v * multiplier, 1 << 31, "HalfUp")
    v = np.clip(v, -(1 << 31), (1 << 31) - 1)
    right = np.maximum(-np.asarray(shift, dtype=np.int64), 0)
    return round_div(v, np.left_shift(np.int64(1), right), mode)
