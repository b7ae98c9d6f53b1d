"""Compiled (numba) kernels of the quantized CPU tails: exact integer requantization of a 1x1 convolution's
accumulators, and the fused bilinear upsample + ARG_MAX of a class-score map.

Both replace several NumPy passes over (pixels, channels) arrays with one loop that reads each value once
(bench/results/library_threads.md). They compute exactly what their NumPy counterparts compute, which stay the
paths without numba and the references the tests compare with:

- ``requantize`` is TFLite's ``MultiplyByQuantizedMultiplier`` + zero point + clamp on every accumulator,
  in int64 (``qops.multiply_by_quantized_multiplier``, either rounding), with no float shortcut to check;
- ``resize_argmax`` is ``resize.resize_bilinear_argmax``'s cell algorithm (decide a cell from its corners'
  min/max, interpolate only the undecided ones with the kernel's float32 arithmetic, in the same order, and
  no fused multiply-add: numba leaves ``fastmath`` off unless asked).

numba is imported (:func:`compiled`), and each kernel compiled or loaded from the cache folder
(:mod:`libredgetpu_ros.jit`) by :func:`requantize_kernel` / :func:`resize_argmax_kernel`, which a
post-processor calls when it is built, not at import.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from libredgetpu_ros import jit

log = logging.getLogger(__name__)


def _requantize(acc, offset, multiplier, left, right, half, negative, zero_point, low, high,
                out):  # pragma: no cover - compiled
    """``out[i, j] = clamp(MBQM(int(acc[i, j]) + offset[j], multiplier[j], shift[j]) + zero_point)``; the
    parameters after ``offset`` come from :func:`shift_params`.

    ``acc``: float32 exact integers (N, C); ``offset``: int64 (C,) (bias plus constant partial sums);
    ``left``/``right``: the shift split into its positive and negative parts; ``half`` = (1 << right) >> 1 and
    ``negative`` = 1 where right > 0 for gemmlowp's rounding (halves away from zero: one less for negative
    values), 0 for ruy's (halves up).
    """
    n, c = acc.shape
    for i in range(n):
        row = acc[i]
        out_row = out[i]
        for j in range(c):
            a = np.int64(row[j]) + offset[j]
            high_mul = ((a << left[j]) * multiplier[j] + np.int64(1 << 30)) >> np.int64(31)
            rounded = (high_mul + half[j] - (negative[j] & (high_mul >> np.int64(63)))) >> right[j]
            value = rounded + zero_point
            value = low if value < low else value
            value = high if value > high else value
            out_row[j] = value


def _resize_argmax(image, y_start, y_len, y_lo, y_hi, fy, x_start, x_len, x_lo, x_hi, fx,
                   out):  # pragma: no cover - compiled
    """``resize.resize_bilinear_argmax`` for a uint8 ``image`` (h, w, C) into ``out`` (H, W).

    Cells: per axis the runs of outputs reading the same two corners (``_Axis.cells``); ``fy``/``fx``: the
    per-output lerp weights (``_Axis.frac``).
    """
    classes = image.shape[2]
    cell_min = np.empty(classes, np.int32)
    cell_max = np.empty(classes, np.int32)
    contenders = np.empty(classes, np.intp)
    width = out.shape[1]
    row_classes = np.empty(width, np.uint8)  # a cell row's decided classes, copied to each of its rows
    undecided = np.empty(x_start.size, np.bool_)
    top = np.empty(width, np.int32)  # per pixel of a cell's row: best rounded value and its class
    winner = np.empty(width, np.uint8)
    one, half = np.float32(1.0), np.float32(0.5)
    for cy in range(y_start.size):
        top_row, bottom_row = image[y_lo[cy]], image[y_hi[cy]]
        ys, ny = y_start[cy], y_len[cy]
        for cx in range(x_start.size):
            c0, c1 = x_lo[cx], x_hi[cx]
            p00, p01, p10, p11 = top_row[c0], top_row[c1], bottom_row[c0], bottom_row[c1]
            for k in range(classes):  # vectorised over the classes
                a, b, d, e = np.int32(p00[k]), np.int32(p01[k]), np.int32(p10[k]), np.int32(p11[k])
                cell_min[k] = min(min(a, b), min(d, e))
                cell_max[k] = max(max(a, b), max(d, e))
            best, floor = 0, np.int32(-1)
            for k in range(classes):
                if cell_min[k] > floor:  # first maximum of the minima
                    best, floor = k, cell_min[k]
            rival = np.int32(-1)
            for k in range(classes):
                if k != best and cell_max[k] > rival:
                    rival = cell_max[k]
            row_classes[x_start[cx]:x_start[cx] + x_len[cx]] = best
            undecided[cx] = floor <= rival
        for y in range(ys, ys + ny):
            out[y, :] = row_classes
        for cx in range(x_start.size):
            if not undecided[cx]:
                continue
            c0, c1, xs, nx = x_lo[cx], x_hi[cx], x_start[cx], x_len[cx]
            floor = np.int32(-1)
            for k in range(classes):
                low = min(min(np.int32(top_row[c0, k]), np.int32(top_row[c1, k])),
                          min(np.int32(bottom_row[c0, k]), np.int32(bottom_row[c1, k])))
                floor = max(floor, low)
            count = 0
            for k in range(classes):  # the classes whose largest corner reaches the guaranteed value
                high = max(max(np.int32(top_row[c0, k]), np.int32(top_row[c1, k])),
                           max(np.int32(bottom_row[c0, k]), np.int32(bottom_row[c1, k])))
                if high >= floor:
                    contenders[count] = k
                    count += 1
            for y in range(ys, ys + ny):
                wy = fy[y]
                gy = one - wy
                for i in range(nx):
                    top[i] = -(1 << 30)
                    winner[i] = contenders[0]
                for t in range(count):  # ascending ids: a later class wins only when strictly higher
                    k = contenders[t]
                    p00, p01 = np.float32(top_row[c0, k]), np.float32(top_row[c1, k])
                    p10, p11 = np.float32(bottom_row[c0, k]), np.float32(bottom_row[c1, k])
                    for i in range(nx):  # along the row: vectorised
                        wx = fx[xs + i]
                        gx = one - wx
                        value = p00 * (gy * gx)
                        value = value + p01 * (gy * wx)
                        value = value + p10 * (wy * gx)
                        value = value + p11 * (wy * wx)
                        rounded = np.int32(value + half)  # the kernel's +0.5 and truncation
                        higher = rounded > top[i]
                        top[i] = rounded if higher else top[i]
                        winner[i] = k if higher else winner[i]
                out[y, xs:xs + nx] = winner[:nx]


_lock = threading.Lock()
_kernels: dict[str, Any] | None = None
_failed = False


def compiled() -> dict[str, Any] | None:
    """``{"requantize": ..., "resize_argmax": ...}``: numba's dispatchers, made once per process (each
    signature compiles, or loads from the cache, on its first call); None without numba (the callers take
    their NumPy paths)."""
    global _kernels, _failed
    if _kernels is not None or _failed:
        return _kernels
    if not jit.available():
        _failed = True
        return None
    with _lock:
        if _kernels is None and not _failed:
            try:
                njit = jit.njit(cache=True, nogil=True, boundscheck=False)
            except ImportError as exc:  # pragma: no cover - a numba that is found but fails to import
                log.warning("numba cannot be imported (%s): the CPU tails take their NumPy paths", exc)
                _failed = True
                return None
            _kernels = {"requantize": njit(_requantize), "resize_argmax": njit(_resize_argmax)}
    return _kernels


def requantize_kernel(dtype: np.dtype) -> Any:
    """The compiled ``_requantize``, its signature for ``dtype`` outputs compiled (or loaded) now, so the
    post-processor's first frame costs what the next ones cost; None without numba."""
    kernels = compiled()
    if kernels is None:
        return None
    zeros = np.zeros(1, np.int64)
    kernels["requantize"](np.zeros((1, 1), np.float32), zeros, *shift_params(zeros, zeros), 0, 0, 0,
                          np.zeros((1, 1), dtype))
    return kernels["requantize"]


def resize_argmax_kernel() -> Any:
    """The compiled ``_resize_argmax`` for uint8 inputs, compiled (or loaded) now; None without numba."""
    kernels = compiled()
    if kernels is None:
        return None
    index, weight = np.zeros(1, np.intp), np.zeros(1, np.float32)
    kernels["resize_argmax"](np.zeros((1, 1, 1), np.uint8), index, index + 1, index, index, weight, index,
                             index + 1, index, index, weight, np.zeros((1, 1), np.uint8))
    return kernels["resize_argmax"]


# The quantized outputs of a CONV_2D the DeepLab tail requantizes (its output tensor's type).
REQUANTIZE_DTYPES = (np.dtype(np.uint8), np.dtype(np.int8))


def warm_up() -> bool:
    """Both kernels compiled (or loaded) for every type a post-processor builds them for (the ``postprocess``
    family of ``jit.FAMILIES``: what ``libredgetpu-ros kernels build`` runs); False without numba."""
    if compiled() is None:
        return False
    for dtype in REQUANTIZE_DTYPES:
        requantize_kernel(dtype)
    resize_argmax_kernel()
    return True


def shift_params(multiplier: np.ndarray, shift: np.ndarray, half_up: bool = False) -> tuple[np.ndarray, ...]:
    """(multiplier, left, right, half, negative) int64 arrays for ``_requantize``; ``half_up`` as
    ``qops.multiply_by_quantized_multiplier``'s (halves rounded up, not away from zero)."""
    multiplier = np.ascontiguousarray(multiplier, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    left = np.ascontiguousarray(np.maximum(shift, 0))
    right = np.ascontiguousarray(np.maximum(-shift, 0))
    half = (np.int64(1) << right) >> 1
    negative = np.zeros_like(right) if half_up else (right > 0).astype(np.int64)
    return multiplier, left, right, half, negative
