"""OpenCV's ``INTER_AREA`` shrink of a uint8 frame, bit for bit, in one compiled pass (numba).

A camera frame (320×240, 640×480, ...) shrunk to a template's size at a fractional ratio (240 -> 64: 3.75)
takes OpenCV's general area path: per source row, a weighted sum of each output column's source pixels
(float32, weights from ``computeResizeAreaTab``), then per output row a weighted sum of those rows (float32),
rounded half to even. That path walks the frame one scalar tap at a time. Here the same float32 operations
run in the same order for every output value, so the bytes are OpenCV's (``test_resize_exactness.py``
checks them against ``cv2.resize`` on random, extreme and rendered frames of every size pair the package
uses), but the horizontal sums run down the frame's columns (the frame transposed first by OpenCV), so
LLVM vectorizes them across rows; the vertical sums then run along rows. Figures: docs/robotics.md.

Both ratios integer (a 2× shrink, 320×320 -> 64×64) is OpenCV's other area path (integer block sums with its
own rounding, already cheap): :func:`plan` returns None and the caller keeps ``cv2.resize``.

``area(columns, channels, xs, xn, xw, ysi, yal, yofs, out)``: ``columns`` the frame's transpose,
(W·C, H) uint8, C-contiguous (``cv2.transpose`` of the (H, W·C) frame); ``out`` (h, w·C) uint8; the rest
the tables of :func:`plan` (per output element ``i`` of a row: ``xn[i]`` taps starting at element
``xs[i]``, C apart, weights ``xw[i, :xn[i]]``; per output row ``dy``: taps ``yofs[dy]:yofs[dy + 1]`` of
source rows ``ysi`` weighted ``yal``).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from libredgetpu_ros import jit


def _area_taps(ssize: int, dsize: int, scale: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """OpenCV's ``computeResizeAreaTab`` (imgproc/src/resize.cpp) for one axis: (source index, destination
    index, float32 weight) of every tap, in OpenCV's order; the arithmetic in double as there."""
    si: list[int] = []
    di: list[int] = []
    alpha: list[float] = []
    for dx in range(dsize):
        fsx1 = dx * scale
        fsx2 = fsx1 + scale
        cell = min(scale, ssize - fsx1)
        sx1, sx2 = math.ceil(fsx1), math.floor(fsx2)
        sx2 = min(sx2, ssize - 1)
        sx1 = min(sx1, sx2)
        if sx1 - fsx1 > 1e-3:
            si.append(sx1 - 1), di.append(dx), alpha.append((sx1 - fsx1) / cell)
        for sx in range(sx1, sx2):
            si.append(sx), di.append(dx), alpha.append(1.0 / cell)
        if fsx2 - sx2 > 1e-3:
            si.append(sx2), di.append(dx), alpha.append(min(min(fsx2 - sx2, 1.0), cell) / cell)
    return np.array(si, np.int64), np.array(di, np.int64), np.array(alpha, np.float64).astype(np.float32)


def _scale(ssize: int, dsize: int) -> float:
    """OpenCV's ratio of an axis: ``1 / (dsize / ssize)`` in double (not ``ssize / dsize``: the tables use
    this value, whose last bit can differ)."""
    return 1.0 / (dsize / ssize)


def _integer(scale: float) -> bool:
    """OpenCV's ``is_area_fast`` test of one axis (its ``saturate_cast<int>`` rounds half to even)."""
    return abs(scale - round(scale)) < np.finfo(np.float64).eps


class Plan(NamedTuple):
    """The tables of :func:`area` for one (source size, output size, channels)."""

    xs: np.ndarray
    xn: np.ndarray
    xw: np.ndarray
    ysi: np.ndarray
    yal: np.ndarray
    yofs: np.ndarray


@functools.lru_cache(maxsize=32)
def plan(height: int, width: int, out_height: int, out_width: int, channels: int) -> Plan | None:
    """The tables for shrinking (height, width, channels) frames to (out_height, out_width), built once per
    size pair; None where OpenCV takes its integer-ratio path (both ratios integers) or where this is no
    shrink (an output side larger than the frame's)."""
    if out_height > height or out_width > width or min(out_height, out_width, channels) < 1:
        return None
    scale_x, scale_y = _scale(width, out_width), _scale(height, out_height)
    if _integer(scale_x) and _integer(scale_y):
        return None
    si, di, alpha = _area_taps(width, out_width, scale_x)
    counts = np.bincount(di, minlength=out_width)
    starts = np.concatenate(([0], np.cumsum(counts)))
    taps = int(counts.max())
    n = out_width * channels
    xs, xn = np.empty(n, np.int64), np.empty(n, np.int64)
    xw = np.zeros((n, taps), np.float32)
    for dx in range(out_width):
        first, last = starts[dx], starts[dx + 1]
        if not np.array_equal(si[first:last], np.arange(si[first], si[first] + last - first)):
            raise AssertionError(f"area taps of column {dx} are not consecutive")  # OpenCV's tables are
        for c in range(channels):
            i = dx * channels + c
            xs[i], xn[i] = si[first] * channels + c, last - first
            xw[i, :last - first] = alpha[first:last]
    ysi, ydi, yal = _area_taps(height, out_height, scale_y)
    yofs = np.searchsorted(ydi, np.arange(out_height + 1)).astype(np.int64)
    tables = Plan(xs, xn, xw, ysi, yal, yofs)
    for table in tables:
        table.flags.writeable = False  # shared by every frame of the size pair (and every thread)
    return tables


def area(columns, channels, xs, xn, xw, ysi, yal, yofs, out):  # pragma: no cover - compiled
    """``out`` = OpenCV's INTER_AREA shrink of the frame whose transpose is ``columns`` (module docstring:
    arguments, why it is exact)."""
    height = columns.shape[1]
    n = xs.size
    # horizontal: per output element, its taps summed in OpenCV's order (0 + first product is the product),
    # every source row at once: each tap reads one column of the frame, contiguous in ``columns``
    across = np.empty((n, height), np.float32)
    for i in range(n):
        first, weights, acc = xs[i], xw[i], across[i]
        column, weight = columns[first], weights[0]
        for y in range(height):
            acc[y] = np.float32(column[y]) * weight
        for t in range(1, xn[i]):
            column, weight = columns[first + t * channels], weights[t]
            for y in range(height):
                acc[y] += np.float32(column[y]) * weight
    along = np.empty((height, n), np.float32)
    for y0 in range(0, height, 8):
        for i in range(n):
            for y in range(y0, min(y0 + 8, height)):
                along[y, i] = across[i, y]
    # vertical: per output row, its source rows' sums weighted in OpenCV's order, rounded half to even
    total = np.empty(n, np.float32)
    for dy in range(out.shape[0]):
        j = yofs[dy]
        beta, row = yal[j], along[ysi[j]]
        for i in range(n):
            total[i] = beta * row[i]
        for j in range(yofs[dy] + 1, yofs[dy + 1]):
            beta, row = yal[j], along[ysi[j]]
            for i in range(n):
                total[i] += beta * row[i]
        dst = out[dy]
        for i in range(n):
            dst[i] = np.uint8(min(max(np.rint(total[i]), np.float32(0.0)), np.float32(255.0)))


KERNELS = (("area", {"cache": True, "nogil": True}),)
_warm = False


def warm_up() -> bool:
    """Import numba, compile (or load) :func:`area` and run it on the frame kinds a node hands over
    (read-only message views and writable arrays, one and three channels); False without numba (OpenCV
    resizes)."""
    global _warm
    if _warm:
        return True
    if not jit.compile_kernels(globals(), KERNELS):
        return False
    for channels in (1, 3):  # the columns are always cv2.transpose's new array (shrink): writable
        tables = plan(10, 12, 3, 5, channels)
        assert tables is not None
        out = np.empty((3, 5 * channels), np.uint8)
        area(np.zeros((12 * channels, 10), np.uint8), channels, *tables, out)
    _warm = True
    return True


def ready() -> bool:
    """True once warm_up() compiled the kernel (a check for per-frame code: no import, no compile)."""
    return _warm


def shrink(array: np.ndarray, height: int, width: int) -> np.ndarray | None:
    """``cv2.resize(array, (width, height), interpolation=cv2.INTER_AREA)`` of a uint8 (H, W, C) array
    through :func:`area`, as (height, width, C); None when this path does not apply (not warmed up, not a
    shrink, OpenCV's integer-ratio path: the caller resizes with OpenCV)."""
    if not _warm:
        return None
    h, w, c = array.shape
    tables = plan(h, w, height, width, c)
    if tables is None:
        return None
    import cv2

    # the frame's transpose (OpenCV's vectorized byte transpose, cheaper than packing the columns in the
    # kernel), so the kernel's horizontal sums read each source column contiguously
    columns = cv2.transpose(np.ascontiguousarray(array).reshape(h, w * c))
    out = np.empty((height, width, c), np.uint8)
    area(columns, c, *tables, out.reshape(height, width * c))
    return out
