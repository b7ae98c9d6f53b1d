"""Compiled hot paths of the MatMul engine: float weights -> int8 + parameter blob in one pass
(``set_weights``) and the CPU twin's Dense layer (``dense_uint8``).

``quantize.quantize_rows`` + ``blob.build_blob`` take eight NumPy passes over a 1024x1024 float32 matrix
(~2 ms here); this kernel reads each weight once, in the order it is stored, and writes the int8 value, its
blob byte and the per-row rounding error in the same loop (~0.3 ms). It is compiled with numba (a LLVM JIT,
vectorised with AVX2 on x86-64) and cached on disk after the first run (:mod:`libredgetpu_ros.jit`: numba
is imported and the kernels compiled or loaded by :func:`warm_up`, which ``MatMulEngine`` calls when it
opens, not when this module is imported).

It only covers matrices that need no clipping and hold no NaN/inf: that is what a controller, a reservoir
readout or an embedding database sends at control rates. Anything else (a clipped entry, NaN/inf, another
dtype, a non-contiguous array, numba not installed) returns None and the caller takes the exact NumPy path,
which raises the right error or counts the clipped entries. The results are bit-identical to that path:
``tests/matmul/test_matmul_fastpath.py`` checks values, blob and row errors against it, ties included.

Rounding uses the float32 "magic number" ``(s + 1.5 * 2**23) - 1.5 * 2**23``: exact round-half-to-even for
``|s| < 2**22`` under the default rounding mode (what ``np.rint`` does), and vectorisable where a call to
``rintf`` is not. Larger ``|s|`` are clipped anyway, so they leave the fast path through their error (> 0.5).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from libredgetpu_ros import jit
from libredgetpu_ros.matmul.blob import GROUP_OVERHEAD, GROUP_ROWS, TILE_COLS, blob_size
from libredgetpu_ros.matmul.quantize import QuantizedWeights

log = logging.getLogger(__name__)

_HALF_BITS = int(np.float32(0.5).view(np.int32))  # errors are >= 0, so their float32 bits order like them
_FAST_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

def _kernel(weights, inv_scales, values, blob_words, row_error_bits):  # pragma: no cover - compiled
    """Quantize ``weights`` (rows, cols) row by row into ``values`` and the blob's tile words.

    ``blob_words``: the blob as uint32 (groups, 128 + 16 * cols) with the overhead already in place.
    ``row_error_bits``: float32 bits of max |s - q| per row (s = w * inv_scale, q = clip(round(s))).
    """
    rows, cols = weights.shape
    error = np.empty(cols, np.float32)
    error_bits = error.view(np.int32)
    magic = np.float32(12582912.0)  # 1.5 * 2**23
    low, high = np.float32(-128.0), np.float32(127.0)
    for r in range(rows):
        m = inv_scales[r]
        w_row = weights[r]
        v_row = values[r]
        for c in range(cols):
            s = np.float32(w_row[c]) * m
            q = (s + magic) - magic
            q = low if q < low else q
            q = high if q > high else q
            error[c] = abs(s - q)  # NaN stays NaN: its bits are above 0.5's, like any clipped entry's
            v_row[c] = np.int8(np.int32(q))
        worst = np.int32(0)
        for c in range(cols):
            bits = error_bits[c]
            worst = bits if bits > worst else worst
        row_error_bits[r] = worst
        if r % GROUP_ROWS == GROUP_ROWS - 1:  # a group of 64 rows is done: lay out its 4-column tiles
            _tiles(values, blob_words, r // GROUP_ROWS)


def _tiles(values, blob_words, group):  # pragma: no cover - compiled
    """Blob words of one group: (col block k, row in group) <- the row's k-th 4 bytes, sign bits flipped.

    Written in blob order (contiguous stores, strided loads from a group that is still in cache).
    """
    cols = values.shape[1]
    words = values[group * GROUP_ROWS:(group + 1) * GROUP_ROWS].view(np.uint32)
    out = blob_words[group]
    head_words = GROUP_OVERHEAD // 4
    for k in range(cols // TILE_COLS):
        base = head_words + k * GROUP_ROWS
        for row in range(GROUP_ROWS):
            out[base + row] = words[row, k] ^ np.uint32(0x80808080)


def _dense_rows(weights, centred, multipliers, zp_out, out_row):  # pragma: no cover - compiled
    """uint8 outputs of every row for one centred input (float32 ``xq - zp_in``).

    Compiled with ``reassoc``/``contract`` so the row sums vectorise: exact all the same, because it is only
    used when every partial sum is an integer float32 holds (twin.exact_float_dtype).
    """
    cols = centred.shape[0]
    low, high = np.float32(0.0), np.float32(255.0)
    for r in range(weights.shape[0]):
        w_row = weights[r]
        acc = np.float32(0.0)
        for c in range(cols):
            acc += np.float32(w_row[c]) * centred[c]
        v = np.rint(acc * multipliers[r]) + np.float32(zp_out)
        v = low if v < low else v
        v = high if v > high else v
        out_row[r] = np.uint8(v)


def _dense(weights, xq, zp_in, multipliers, zp_out, out):  # pragma: no cover - compiled
    """The twin's Dense layer: int8 weights x (uint8 inputs ``xq`` (k, cols) - zp_in) -> uint8 (k, rows)."""
    k, cols = xq.shape
    centred = np.empty(cols, np.float32)
    for i in range(k):
        for c in range(cols):
            centred[c] = np.float32(xq[i, c]) - np.float32(zp_in)
        _dense_rows(weights, centred, multipliers, zp_out, out[i])


def _twin(x, weights, in_scale, zp_in, multipliers, zp_out, out_scale, y):  # pragma: no cover - compiled
    """Float inputs (k, cols) -> float32 outputs (k, rows): twin.quantize_input, the Dense layer and
    twin.dequantize in one call, with the same float64 / float32 operations (no fast-math here)."""
    k, cols = x.shape
    rows = weights.shape[0]
    centred = np.empty(cols, np.float32)
    yq = np.empty(rows, np.uint8)
    zero, top = 0.0, 255.0
    for i in range(k):
        for c in range(cols):
            v = np.float64(x[i, c]) / in_scale
            q = np.trunc(v + np.copysign(0.5, v)) + zp_in  # round half away from zero, as TFLite
            q = zero if q < zero else q
            q = top if q > top else q
            centred[c] = np.float32(np.uint8(q)) - np.float32(zp_in)
        _dense_rows(weights, centred, multipliers, zp_out, yq)
        for r in range(rows):
            y[i, r] = (np.float32(yq[r]) - np.float32(zp_out)) * np.float32(out_scale)


_compiled: Any = None
_dense_compiled: Any = None
_twin_compiled: Any = None
_compile_lock = threading.Lock()
_warm = False
_failed = False


def _compile() -> bool:
    """Import numba and wrap the kernels (once per process); False without numba."""
    global _compiled, _dense_compiled, _twin_compiled, _dense_rows, _tiles, _failed
    if _compiled is not None:
        return True
    if _failed or not jit.available():
        return False
    with _compile_lock:
        if _compiled is None and not _failed:
            try:
                njit = jit.njit
                njit(cache=True)  # imports numba: a broken install leaves the NumPy paths, logged once
            except ImportError as exc:  # pragma: no cover - needs a numba that is found but fails to import
                log.warning("numba cannot be imported (%s): the matmul engine takes its NumPy paths", exc)
                _failed = True
                return False
            # The callees first: the callers' globals name them when they are compiled.
            _dense_rows = njit(cache=True, nogil=True, boundscheck=False,
                               fastmath={"reassoc", "contract"})(_dense_rows)
            _tiles = njit(cache=True, nogil=True, boundscheck=False)(_tiles)
            _dense_compiled = njit(cache=True, nogil=True, boundscheck=False)(_dense)
            _twin_compiled = njit(cache=True, nogil=True, boundscheck=False)(_twin)
            _compiled = njit(cache=True, nogil=True, boundscheck=False)(_kernel)
    return _compiled is not None


def twin_kernel() -> Any:
    """The compiled twin ``(x, weights, in_scale, zp_in, multipliers, zp_out, out_scale, y)`` for other
    compiled code to call (robotics.reservoir fuses it into its step), warmed up; None without numba."""
    warm_up()
    return _twin_compiled


def available() -> bool:
    """True when the compiled kernel can run (numba is installed; not imported by this question)."""
    return jit.available() and not _failed


def quantize_to_blob(weights: object, scales: np.ndarray, overhead: np.ndarray,
                     cols: int) -> tuple[QuantizedWeights, np.ndarray] | None:
    """(quantized weights, uint8 parameter blob) of float ``weights`` with per-row ``scales``, or None.

    Same values, blob and statistics as ``quantize_rows`` + ``build_blob``. None means "take the exact
    NumPy path": numba missing, a dtype other than float32/float64, a non-contiguous array, a shape other
    than (len(scales), cols) or one that cannot be laid out, NaN/inf, or an entry outside the int8 range
    (that path reports each of them).
    """
    if not isinstance(weights, np.ndarray) or weights.ndim != 2 or not _compile():
        return None
    rows = scales.shape[0]
    if (weights.dtype not in _FAST_DTYPES or weights.shape != (rows, cols) or not weights.flags.c_contiguous
            or rows % GROUP_ROWS or cols % TILE_COLS or cols == 0):
        return None
    scales64 = np.asarray(scales, dtype=np.float64)
    inv_scales = (1.0 / scales64).astype(np.float32)  # as quantize_rows computes it
    values = np.empty((rows, cols), dtype=np.int8)
    blob = np.empty(blob_size(rows, cols), dtype=np.uint8)
    groups = rows // GROUP_ROWS
    grouped = blob.reshape(groups, GROUP_OVERHEAD + GROUP_ROWS * cols)
    grouped[:, :GROUP_OVERHEAD] = np.asarray(overhead, dtype=np.uint8).reshape(groups, GROUP_OVERHEAD)
    error_bits = np.empty(rows, dtype=np.int32)
    _compiled(weights, inv_scales, values, grouped.view(np.uint32), error_bits)
    if int(error_bits.max()) > _HALF_BITS:  # clipped, NaN or inf somewhere: the NumPy path decides
        return None
    row_error = error_bits.view(np.float32).astype(np.float64) * scales64
    return QuantizedWeights(values, 0, float(row_error.max(initial=0.0)), 0.0, row_error), blob


def dense_uint8(weights: np.ndarray, xq: np.ndarray, input_zero_point: int, multipliers: np.ndarray,
                output_zero_point: int) -> np.ndarray | None:
    """uint8 (k, rows) of the twin's Dense layer for int8 ``weights``, or None without numba.

    Only for shapes where float32 sums are exact (the caller, ``twin.dense_uint8``, checks it).
    """
    if weights.dtype != np.int8 or not weights.flags.c_contiguous or not _compile():
        return None
    out = np.empty((xq.shape[0], weights.shape[0]), dtype=np.uint8)
    _dense_compiled(weights, np.ascontiguousarray(xq, dtype=np.uint8), int(input_zero_point),
                    np.ascontiguousarray(multipliers, dtype=np.float32), int(output_zero_point), out)
    return out


def twin_matmul(x: np.ndarray, weights: np.ndarray, input_scale: float, input_zero_point: int,
                multipliers: np.ndarray, output_zero_point: int, output_scale: float) -> np.ndarray | None:
    """float32 (k, rows) = dequantize(Dense(quantize_input(x))) for finite float ``x`` (k, cols), or None
    without numba. Bit-identical to twin.quantize_input + twin.dense_uint8 + twin.dequantize; only for shapes
    where float32 sums are exact (the caller checks twin.exact_float_dtype)."""
    if weights.dtype != np.int8 or not weights.flags.c_contiguous or not _compile():
        return None
    y = np.empty((x.shape[0], weights.shape[0]), dtype=np.float32)
    _twin_compiled(np.ascontiguousarray(x, dtype=np.float64), weights, float(input_scale),
                   float(input_zero_point), np.ascontiguousarray(multipliers, dtype=np.float32),
                   int(output_zero_point), float(output_scale), y)
    return y


def warm_up() -> bool:
    """Import numba and compile (or load from the cache folder) every kernel for the dtypes the engine
    passes, now rather than on a first swap or matmul (the ``matmul`` family of ``jit.FAMILIES``). Free after
    the first call in a process; False without numba."""
    global _warm
    if _warm:
        return True
    if not _compile():
        return False
    overhead = np.zeros(GROUP_OVERHEAD, dtype=np.uint8)
    scales = np.ones(GROUP_ROWS, dtype=np.float32)
    # read-only arrays are a specialization of their own: the control node's requests and the reservoir's
    # state messages arrive as np.frombuffer views
    for dtype in _FAST_DTYPES:
        zeros = np.zeros((GROUP_ROWS, TILE_COLS), dtype=dtype)
        for weights in (zeros, jit.read_only(zeros)):
            quantize_to_blob(weights, scales, overhead, TILE_COLS)
    weights = np.zeros((GROUP_ROWS, TILE_COLS), np.int8)
    active = jit.read_only(weights)  # an engine's active weights are read-only (one immutable version)
    x = np.zeros((1, TILE_COLS))
    dense_uint8(weights, np.zeros((1, TILE_COLS), np.uint8), 128, scales, 128)
    dense_uint8(active, np.zeros((1, TILE_COLS), np.uint8), 128, scales, 128)
    twin_matmul(x, weights, 1.0, 128, scales, 128, 1.0)
    for inputs in (x, jit.read_only(x)):
        twin_matmul(inputs, active, 1.0, 128, scales, 128, 1.0)
    _warm = True
    return True
