"""Compiled kernels of OpticalFlow's CPU part (numba), with :mod:`robotics.correlation` as the NumPy path.

A 14×14×8 map pair is ~130k multiply-adds: less than what the ~40 NumPy calls of the NumPy path cost around
them (1-2 µs each). Here a frame's preparation (pool, border crop, zero mean, energy table) is one call and
a pair's scores, overlap energies and peak another (numba, LLVM-vectorised, cached on disk after the first
compile), which is what makes the CPU part ≥ 3× faster than LibrEdgeTPU's at 64×64 (bench/results/flow.md).

Vectorisation needs the inner loop to run over two contiguous slices with a plain ``range`` index: indexing
``a[y - dy, k - off]`` instead makes numba check for negative indices on every access and runs 4× slower.

Same arithmetic as the NumPy path: float64 sums, exact for the integer features of the ``libredgetpu`` mode
whatever the summation order (partial sums stay far below 2**53), and within ~1e-12 relative for the
normalised mode; ``test_flow_exactness.py`` checks both.

The rest of a frame's CPU work is here too: ``stretch`` (the frame's statistics and contrast stretch, the same
model input as OpenCV/NumPy), and the refinement at the frame's resolution (robotics/flow_refine.py):
``fine_level`` (a level's blur and Sobel, OpenCV's to float32 rounding), ``lk_level`` (Gauss-Newton steps of
the translation, one pass over the overlap each), ``shift_box`` (the final warp the match is scored on),
``overlap``. Each is checked against its OpenCV/NumPy path in ``test_flow_exactness.py``.

numba is imported and the kernels compiled (or
loaded from the package's cache folder, :mod:`libredgetpu_ros.jit`) by :func:`warm_up`, which the flow calls
when it opens; without numba :func:`warm_up` returns False and
:class:`~libredgetpu_ros.robotics.flow.OpticalFlow` takes the NumPy path (same results, slower).
"""

from __future__ import annotations

import math

import numpy as np

from libredgetpu_ros import jit


def pool_features(feature_map, factor, zero, margin, zero_mean, pooled, table):  # pragma: no cover
    """``pooled[y, x, c]``: block sum (``factor``; 1 = none) of ``feature_map - zero`` over the cells
    ``margin`` in from each edge, minus each channel's mean when ``zero_mean``. ``table``: the summed-area
    table (``(h+1)×(w+1)``, zero first row/column) of the per-cell energy ``Σ_c pooled²``; skipped when
    ``table`` is empty."""
    h, w, c = pooled.shape
    for y in range(h):
        for x in range(w):
            for ch in range(c):
                pooled[y, x, ch] = 0.0
            for dy in range(factor):
                row = (y + margin) * factor + dy
                for dx in range(factor):
                    col = (x + margin) * factor + dx
                    for ch in range(c):
                        pooled[y, x, ch] += feature_map[row, col, ch]
    offset = float(zero) * factor * factor
    for ch in range(c):
        mean = offset
        if zero_mean:
            total = 0.0
            for y in range(h):
                for x in range(w):
                    total += pooled[y, x, ch]
            mean = total / (h * w)
        if mean != 0.0:
            for y in range(h):
                for x in range(w):
                    pooled[y, x, ch] -= mean
    if table.size:
        for x in range(w + 1):
            table[0, x] = 0.0
        for y in range(h):
            table[y + 1, 0] = 0.0
            run = 0.0
            for x in range(w):
                cell = 0.0
                for ch in range(c):
                    cell += pooled[y, x, ch] * pooled[y, x, ch]
                run += cell
                table[y + 1, x + 1] = table[y, x + 1] + run


def _correlate(a, b, r, scores):  # pragma: no cover - compiled
    """``scores[dy + r, dx + r] = Σ a[y - dy, x - dx, :] · b[y, x, :]`` over the overlap."""
    h, w, c = a.shape
    fa = a.reshape(h, w * c)
    fb = b.reshape(h, w * c)
    for j in range(2 * r + 1):
        dy = j - r
        y0, y1 = max(0, dy), h + min(0, dy)
        for i in range(2 * r + 1):
            dx = i - r
            lo, hi = max(0, dx) * c, (w + min(0, dx)) * c
            n = hi - lo
            acc = 0.0
            for y in range(y0, y1):
                ra = fa[y - dy, lo - dx * c:hi - dx * c]
                rb = fb[y, lo:hi]
                for k in range(n):
                    acc += ra[k] * rb[k]
            scores[j, i] = acc


def _box(table, y0, y1, x0, x1):  # pragma: no cover - compiled
    return table[y1, x1] - table[y0, x1] - table[y1, x0] + table[y0, x0]


def normalized_peak(a, b, table_a, table_b, r, scores):  # pragma: no cover - compiled
    """Normalised cross-correlation over each overlap into ``scores``, then the peak: ``(dx, dy, score,
    margin, saturated)`` as ``correlation.refined_peak`` computes it."""
    _correlate(a, b, r, scores)
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
    h, w = gray.shape
    counts = np.zeros(256, np.int64)
    for y in range(h):
        row = gray[y]
        for x in range(w):
            counts[row[x]] += 1
    n = h * w
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
    for y in range(h):
        row, dst = gray[y], out[y]
        for x in range(w):
            dst[x] = table[row[x]]
    return mean, std


# -- the refinement at the frame's resolution (robotics/flow_refine.py) ------------------------------------

NO_OVERLAP, APERTURE, RAN_OUT, CONVERGED = 0, 1, 2, 3  # how lk_level ended


def overlap(h, w, dx, dy, border):  # pragma: no cover - compiled
    """(ok, y0, y1, x0, x1): the rectangle [y0, y1) × [x0, x1) of frame t whose points y land inside frame t+1
    at y + d, less ``border``; ok False when it is under 8 pixels a side, or d is not a finite number within
    1e6 pixels (an integer conversion of anything larger is undefined in compiled code)."""
    if not (abs(dx) < 1e6 and abs(dy) < 1e6):
        return False, 0, 0, 0, 0
    x0 = max(border, math.ceil(-dx) + border)
    x1 = min(w - border, math.floor(w - 1 - dx) - border)
    y0 = max(border, math.ceil(-dy) + border)
    y1 = min(h - border, math.floor(h - 1 - dy) - border)
    return x1 - x0 >= 8 and y1 - y0 >= 8, y0, y1, x0, x1


def lk_level(template, grad_x, grad_y, moving, ux, uy, iterations, border, min_det,
             converged_px):  # pragma: no cover - compiled
    """Gauss-Newton iterations of the global translation at one level (inverse compositional: the Hessian of
    ``template``'s gradients over the overlap, the error of ``moving`` sampled at y + u): ``(ux, uy, how)``
    with ``how`` one of NO_OVERLAP, APERTURE (det <= ``min_det`` · a·c), RAN_OUT, CONVERGED (a step under
    ``converged_px`` on both axes). A translation samples every pixel with the same bilinear weights, so
    the warp is a 2×2 stencil over contiguous row slices (vectorised) and no warped image is made."""
    h, w = template.shape
    for _ in range(iterations):
        ok, y0, y1, x0, x1 = overlap(h, w, ux, uy, border)
        if not ok:
            return ux, uy, NO_OVERLAP
        ix, iy = math.floor(ux), math.floor(uy)
        fx, fy = ux - ix, uy - iy
        w00, w01, w10, w11 = (1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy
        n = x1 - x0
        a = b = c = ex = ey = 0.0
        for y in range(y0, y1):
            m0 = moving[y + iy, x0 + ix:x1 + ix + 1]
            m1 = moving[y + iy + 1, x0 + ix:x1 + ix + 1]
            t = template[y, x0:x1]
            gx = grad_x[y, x0:x1]
            gy = grad_y[y, x0:x1]
            for k in range(n):
                e = w00 * m0[k] + w01 * m0[k + 1] + w10 * m1[k] + w11 * m1[k + 1] - t[k]
                a += gx[k] * gx[k]
                b += gx[k] * gy[k]
                c += gy[k] * gy[k]
                ex += gx[k] * e
                ey += gy[k] * e
        det = a * c - b * b
        if not det > min_det * max(a * c, 1e-30):
            return ux, uy, APERTURE
        step_x = (c * ex - b * ey) / det
        step_y = (a * ey - b * ex) / det
        ux, uy = ux - step_x, uy - step_y
        if abs(step_x) < converged_px and abs(step_y) < converged_px:
            return ux, uy, CONVERGED
    return ux, uy, RAN_OUT


def shift_box(moving, ux, uy, y0, y1, x0, x1, out):  # pragma: no cover - compiled
    """``out[y - y0, x - x0]`` = ``moving`` sampled at (x + ux, y + uy), bilinear (the same stencil as
    lk_level), over the box (which overlap() keeps inside ``moving``)."""
    ix, iy = math.floor(ux), math.floor(uy)
    fx, fy = ux - ix, uy - iy
    w00, w01, w10, w11 = (1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy
    n = x1 - x0
    for y in range(y0, y1):
        m0 = moving[y + iy, x0 + ix:x1 + ix + 1]
        m1 = moving[y + iy + 1, x0 + ix:x1 + ix + 1]
        row = out[y - y0]
        for k in range(n):
            row[k] = w00 * m0[k] + w01 * m0[k + 1] + w10 * m1[k] + w11 * m1[k + 1]


def _pad101(image, r, out):  # pragma: no cover - compiled
    """``out`` = ``image`` with ``r`` pixels of OpenCV's default border (reflect 101) on every side."""
    h, w = image.shape
    for y in range(h + 2 * r):
        sy = y - r
        sy = -sy if sy < 0 else (2 * h - sy - 2 if sy >= h else sy)
        src, dst = image[sy], out[y, r:r + w]
        for x in range(w):
            dst[x] = src[x]
        for k in range(1, r + 1):
            out[y, r - k] = src[k]
            out[y, r + w - 1 + k] = src[w - 1 - k]


def fine_level(gray, taps, image, grad_x, grad_y):  # pragma: no cover - compiled
    """One level of robotics/flow_refine.py: ``image`` = ``gray`` blurred by the separable ``taps``
    (cv2.GaussianBlur's kernel), ``grad_x``, ``grad_y`` = its 3×3 Sobel / 8, both with OpenCV's default
    border (reflect 101), in float32 as OpenCV computes them (sums in another order: ~1e-7 apart)."""
    h, w = gray.shape
    r = taps.size // 2
    padded = np.empty((h + 2 * r, w + 2 * r), np.float32)
    _pad101(gray, r, padded)
    across = np.zeros((h + 2 * r, w), np.float32)  # the horizontal pass, on every padded row
    for y in range(h + 2 * r):
        row = across[y]
        for k in range(taps.size):
            c, src = taps[k], padded[y, k:k + w]  # slices and range indices: the loops vectorise
            for x in range(w):
                row[x] += c * src[x]
    for y in range(h):
        out = image[y]
        out[:] = 0.0
        for k in range(taps.size):
            c, src = taps[k], across[y + k]
            for x in range(w):
                out[x] += c * src[x]
    edge = np.empty((h + 2, w + 2), np.float32)
    _pad101(image, 1, edge)
    two, eighth = np.float32(2.0), np.float32(0.125)
    for y in range(h):
        ul, um, ur = edge[y, 0:w], edge[y, 1:w + 1], edge[y, 2:w + 2]
        ml, mr = edge[y + 1, 0:w], edge[y + 1, 2:w + 2]
        dl, dm, dr = edge[y + 2, 0:w], edge[y + 2, 1:w + 1], edge[y + 2, 2:w + 2]
        gx, gy = grad_x[y], grad_y[y]
        for x in range(w):
            gx[x] = ((ur[x] - ul[x]) + two * (mr[x] - ml[x]) + (dr[x] - dl[x])) * eighth
            gy[x] = ((dl[x] - ul[x]) + two * (dm[x] - um[x]) + (dr[x] - ur[x])) * eighth

_FAST = {"cache": True, "nogil": True, "fastmath": True}
_EXACT = {"cache": True, "nogil": True}
_SUMS = {"cache": True, "nogil": True, "fastmath": {"reassoc", "contract"}}  # vectorised sums, NaN kept
KERNELS = (("_correlate", _FAST), ("_box", dict(_EXACT, inline="always")), ("_refine", _EXACT),
           ("pool_features", _FAST), ("normalized_peak", _EXACT), ("soft_argmax_peak", _EXACT),
           ("overlap", _EXACT), ("lk_level", _SUMS), ("shift_box", _SUMS), ("_pad101", _EXACT),
           ("fine_level", _SUMS), ("stretch", _EXACT))
_warm = False


def available() -> bool:
    """True when numba is installed (asked without importing it): the kernels can be compiled."""
    return jit.available()


def warm_up() -> bool:
    """Import numba, compile (or load from the cache folder, libredgetpu_ros.jit) every kernel and run it
    once for the dtypes the flow uses, so that the first frame of a stream costs what the next ones cost;
    False without numba (the flow then takes the NumPy path)."""
    global _warm
    if _warm:
        return True
    if not jit.compile_kernels(globals(), KERNELS):
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
    image = np.zeros((16, 16), np.float32)
    overlap(16, 16, 0.5, -0.5, 2)
    lk_level(image, image, image, image, 0.5, -0.5, 1, 2, 0.05, 0.01)
    shift_box(image, 0.5, -0.5, 2, 10, 2, 10, np.empty((8, 8), np.float32))
    fine_level(image, np.ones(9, np.float32), image.copy(), image.copy(), image.copy())
    frame = np.arange(64, dtype=np.uint8).reshape(8, 8)
    for gray in (frame, jit.read_only(frame)):  # a one-channel frame at the template's size stays read-only
        stretch(gray, 48.0, 1e-3, frame.copy())
    _warm = True
    return True


def ready() -> bool:
    """True once warm_up() compiled the kernels (a check for per-call code: no import, no compile)."""
    return _warm
