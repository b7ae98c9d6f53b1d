"""Compiled kernels of OpticalFlow's CPU part (numba), with :mod:`robotics.correlation` as the NumPy path.

A 14×14×8 map pair is ~130k multiply-adds: less than what the ~40 NumPy calls of the NumPy path cost around
them (1-2 µs each). Here a frame's preparation (pool, border crop, zero mean, energy table) is one call and
a pair's scores, overlap energies and peak another (numba, LLVM-vectorised, cached on disk after the first
compile), which is what makes the CPU part ≥ 3× faster than LibrEdgeTPU's at 64×64 (bench/results/flow.md).

Vectorisation needs the inner loop to index contiguous memory with a plain ``range`` index and no signed
arithmetic: indexing ``a[y - dy, k - off]`` makes numba check for negative indices on every access and runs
4× slower; flat arrays indexed by unsigned offsets (or a slice per row, which costs a reference count) do not.

Same arithmetic as the NumPy path: float64 sums, exact for the integer features of the ``libredgetpu`` mode
whatever the summation order (partial sums stay far below 2**53); the normalised mode correlates in float32
lanes (row sums; rows added in float64), within ~1e-6 relative; ``test_flow_exactness.py`` checks both.

The rest of a frame's CPU work is here too: ``stretch`` (the frame's statistics and contrast stretch, the same
model input as OpenCV/NumPy); the refinement at the frame's resolution has its own module
(robotics/flow_refine_kernels.py), compiled and warmed up with these.

numba is imported and the kernels compiled (or
loaded from the package's cache folder, :mod:`libredgetpu_ros.jit`) by :func:`warm_up`, which the flow calls
when it opens; without numba :func:`warm_up` returns False and
:class:`~libredgetpu_ros.robotics.flow.OpticalFlow` takes the NumPy path (same results, slower).
"""

from __future__ import annotations

import math

import numpy as np

from libredgetpu_ros import jit
from libredgetpu_ros.robotics import flow_refine_kernels, image_kernels


def pool_features(feature_map, factor, zero, margin, zero_mean, pooled, table):  # pragma: no cover
    """``pooled[y, x, c]``: block sum (``factor``; 1 = none) of ``feature_map - zero`` over the cells
    ``margin`` in from each edge, minus each channel's mean when ``zero_mean``. ``table``: the summed-area
    table (``(h+1)×(w+1)``, zero first row/column) of the per-cell energy ``Σ_c pooled²``; skipped when
    ``table`` is empty. Flat unsigned indices (see the module's docstring)."""
    h, w, c = pooled.shape
    width = feature_map.shape[1]
    src, dst = feature_map.reshape(feature_map.size), pooled.reshape(pooled.size)
    uc = np.uint64(c)
    if factor == 1:  # the pooled template: the cells inside the margin, as float64
        run = np.uint64(w * c)
        for y in range(h):
            s, d = np.uint64(((y + margin) * width + margin) * c), np.uint64(y * w * c)
            for k in range(run):
                dst[d + k] = src[s + k]
    else:
        dst[:] = 0.0
        for y in range(h):
            for dy in range(factor):
                row = (y + margin) * factor + dy
                for x in range(w):
                    d = np.uint64((y * w + x) * c)
                    for dx in range(factor):
                        s = np.uint64((row * width + (x + margin) * factor + dx) * c)
                        for ch in range(uc):
                            dst[d + ch] += src[s + ch]
    means = np.full(c, float(zero) * factor * factor)
    cells = np.uint64(h * w)
    if zero_mean:
        means[:] = 0.0
        for p in range(cells):
            d = p * uc
            for ch in range(uc):
                means[ch] += dst[d + ch]
        means /= h * w
    for p in range(cells):
        d = p * uc
        for ch in range(uc):
            dst[d + ch] -= means[ch]
    if table.size:
        for x in range(w + 1):
            table[0, x] = 0.0
        for y in range(h):
            table[y + 1, 0] = 0.0
            run_sum = 0.0
            for x in range(w):
                d = np.uint64((y * w + x) * c)
                cell = 0.0
                for ch in range(uc):
                    cell += dst[d + ch] * dst[d + ch]
                run_sum += cell
                table[y + 1, x + 1] = table[y, x + 1] + run_sum


def _correlate(a, b, r, scores):  # pragma: no cover - compiled
    """``scores[dy + r, dx + r] = Σ a[y - dy, x - dx, :] · b[y, x, :]`` over the overlap (each row summed in
    the arrays' dtype, the rows in float64). Flat unsigned indices: a signed one is checked for a negative
    value on every access, and a slice per row costs a reference count (2 µs of 9 at 14×14×8)."""
    h, w, c = a.shape
    fa, fb = a.reshape(a.size), b.reshape(b.size)
    zero = np.zeros(1, a.dtype)[0]
    for j in range(2 * r + 1):
        dy = j - r
        y0, y1 = max(0, dy), h + min(0, dy)
        for i in range(2 * r + 1):
            dx = i - r
            lo, hi = max(0, dx) * c, (w + min(0, dx)) * c
            n = np.uint64(hi - lo)
            acc = 0.0
            for y in range(y0, y1):
                pa = np.uint64((y - dy) * w * c + lo - dx * c)  # both >= 0: y >= dy, lo >= dx * c
                pb = np.uint64(y * w * c + lo)
                row = zero  # a row's sum in the features' own type (float32 lanes: twice as many)
                for k in range(n):
                    row += fa[pa + k] * fb[pb + k]
                acc += row
            scores[j, i] = acc


def _box(table, y0, y1, x0, x1):  # pragma: no cover - compiled
    return table[y1, x1] - table[y0, x1] - table[y1, x0] + table[y0, x0]


def normalized_peak(a, b, table_a, table_b, r, scores):  # pragma: no cover - compiled
    """Normalised cross-correlation over each overlap into ``scores``, then the peak: ``(dx, dy, score,
    margin, saturated)`` as ``correlation.refined_peak`` computes it."""
    # the normalised scores from float32 lanes (twice as many per instruction): ~1e-6 relative to float64,
    # against validity thresholds 0.1 apart (seed_peaks compares the scores in float32 already)
    _correlate(a.astype(np.float32), b.astype(np.float32), r, scores)
    h, w = a.shape[0], a.shape[1]
    side = 2 * r + 1
    bj, bi, best = 0, 0, -math.inf
    for j in range(side):
        dy = j - r
        y0, y1 = max(0, dy), h + min(0, dy)
        for i in range(side):
            dx = i - r
            x0, x1 = max(0, dx), w + min(0, dx)
            energy = _box(table_a, y0 - dy, y1 - dy, x0 - dx, x1 - dx) * _box(table_b, y0, y1, x0, x1)
            value = scores[j, i] / math.sqrt(max(energy, 1e-30))
            scores[j, i] = value
            if value > best:
                bj, bi, best = j, i, value
    other = -math.inf
    for j in range(side):
        for i in range(side):
            if (abs(j - bj) > 1 or abs(i - bi) > 1) and scores[j, i] > other:
                other = scores[j, i]
    margin = best - other if side > 3 else math.inf
    ox = oy = 0.0
    edge = False
    if 0 < bi < side - 1:
        ox = _refine(scores[bj, bi - 1], best, scores[bj, bi + 1])
    else:
        edge = True
    if 0 < bj < side - 1:
        oy = _refine(scores[bj - 1, bi], best, scores[bj + 1, bi])
    else:
        edge = True
    return bi - r + ox, bj - r + oy, best, margin, edge


def _refine(lower, best, upper):  # pragma: no cover - compiled
    """``correlation.refine_offset``: Gaussian vertex when all three are positive, else parabolic."""
    if lower > 0.0 and best > 0.0 and upper > 0.0:
        lower, best, upper = math.log(lower), math.log(best), math.log(upper)
    curvature = lower - 2.0 * best + upper
    if curvature >= 0.0:
        return 0.0
    return min(0.5, max(-0.5, 0.5 * (lower - upper) / curvature))


def soft_argmax_peak(a, b, r, temperature, counts, scores):  # pragma: no cover - compiled
    """LibrEdgeTPU's scores (raw correlation / overlap count) into ``scores`` and its soft argmax:
    ``(vx, vy, largest weight)``."""
    _correlate(a, b, r, scores)
    side = 2 * r + 1
    top = -math.inf
    for j in range(side):
        for i in range(side):
            scores[j, i] /= counts[j, i]
            top = max(top, scores[j, i])
    total = vx = vy = 0.0
    t = max(temperature, 1e-6)
    for j in range(side):
        for i in range(side):
            weight = math.exp((scores[j, i] - top) / t)
            total += weight
            vx += weight * (i - r)
            vy += weight * (j - r)
    if total < 1e-12:
        return 0.0, 0.0, 0.0
    return vx / total, vy / total, 1.0 / total


def stretch(gray, gain, min_std, out):  # pragma: no cover - compiled
    """(mean, standard deviation) of the uint8 frame ``gray`` (integer histogram: the mean exact), and when
    the deviation is at least ``min_std``, ``out`` = the frame stretched to mean 128 and ``gain`` grey levels
    per deviation: each level once as OpenCV/NumPy compute it in OpticalFlow.features (float32, rounded half
    to even, clipped), then looked up per pixel."""
    pixels, dst = gray.reshape(gray.size), out.reshape(out.size)
    n = pixels.size
    counts = np.zeros(256, np.int64)
    for p in range(np.uint64(n)):
        counts[pixels[p]] += 1
    total = 0
    for level in range(256):
        total += level * counts[level]
    mean = total / n
    spread = 0.0
    for level in range(256):
        if counts[level]:
            spread += counts[level] * (level - mean) ** 2
    std = math.sqrt(spread / n)
    if std < min_std or std <= 0.0:
        return mean, std
    table = np.empty(256, np.uint8)
    factor, centre = np.float32(gain / std), np.float32(mean)
    for level in range(256):
        value = np.rint((np.float32(level) - centre) * factor + np.float32(128.0))
        table[level] = np.uint8(min(max(value, np.float32(0.0)), np.float32(255.0)))
    for p in range(np.uint64(n)):
        dst[p] = table[pixels[p]]
    return mean, std


_FAST = {"cache": True, "nogil": True, "fastmath": True}
_EXACT = {"cache": True, "nogil": True}
KERNELS = (("_correlate", _FAST), ("_box", dict(_EXACT, inline="always")), ("_refine", _EXACT),
           ("pool_features", _FAST), ("normalized_peak", _EXACT), ("soft_argmax_peak", _EXACT),
           ("stretch", _EXACT))
_warm = False


def available() -> bool:
    """True when numba is installed (asked without importing it): the kernels can be compiled."""
    return jit.available()


def warm_up() -> bool:
    """Import numba, compile (or load from the cache folder, libredgetpu_ros.jit) every kernel (the
    refinement's too: robotics/flow_refine_kernels.py) and run it once for the dtypes the flow uses, so
    that the first frame of a stream costs what the next ones cost; False without numba (the flow then
    takes the NumPy path)."""
    global _warm
    if _warm:
        return True
    if not jit.compile_kernels(globals(), KERNELS) or not flow_refine_kernels.warm_up():
        return False
    feat = np.zeros((8, 8, 2), np.uint8)
    pooled = np.zeros((4, 4, 2))
    table = np.zeros((5, 5))
    for raw in (feat, jit.read_only(feat)):  # the Edge TPU's outputs are read-only views of the USB bytes
        pool_features(raw, 2, 0, 0, True, pooled, table)
        pool_features(raw, 1, 0, 2, False, pooled, np.zeros((0, 0)))
    scores = np.zeros((3, 3))
    normalized_peak(pooled, pooled, table, table, 1, scores)
    soft_argmax_peak(pooled, pooled, 1, 0.1, np.ones((3, 3)), scores)
    frame = np.arange(64, dtype=np.uint8).reshape(8, 8)
    for gray in (frame, jit.read_only(frame)):  # a one-channel frame at the template's size stays read-only
        stretch(gray, 48.0, 1e-3, frame.copy())
    if not image_kernels.warm_up():  # the RGB frames' luma (robotics/image_kernels.py)
        return False
    _warm = True
    return True


def ready() -> bool:
    """True once warm_up() compiled the kernels (a check for per-call code: no import, no compile)."""
    return _warm
