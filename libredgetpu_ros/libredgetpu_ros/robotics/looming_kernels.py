"""The looming scale mode's CPU work compiled (numba): the border correction (robotics/looming_border.py) and
the scale registration of the time to contact (robotics/ttc.py).

``BorderCorrection`` recomputes the device's quantized Sobel energy at the ~125 (64×64) or ~250 (128×128)
pooled pixels whose 3×3 neighbourhood reaches the padding, once with the device's zero padding and once with
the border repeated. In NumPy that is two padded copies, two gathers, two small matrix products and ~20
array operations per frame (~80 µs at 64×64, nearly all call overhead); here it is one loop over the ring
pixels (their neighbours' indices and the zero padding's tap weights made once), with the output's decode
and the floor in the same call. Same arithmetic (float64 products and sums, ``np.rint`` half to even, the
model's scales and zero points); the 9-tap sums run in tap order where NumPy's matrix product may not, so a
sum can differ in its last bit (a quantization step flips only if that lands exactly on a half):
``test_ttc.py`` checks kernel and NumPy path agree.

``register_scale`` is ttc.py's Gauss-Newton registration with each step two passes over the window (the warp
of the image and its gradients with the residuals; the Tukey weights and the 5×5 normal equations) instead
of a remap and ~25 array operations. The warp is a scale and a shift per axis, so each step finds the source
columns and rows and their bilinear weights once (39 + 39 at 64×64, not 1,521 pixels) and blends each
window row's two source rows first (contiguous), leaving two gathers a pixel instead of four; per-pixel
values are float32 and the sums run in float32 SIMD lanes (NumPy's sums are float32 too); its bilinear
weights are exact (OpenCV's remap rounds the position to 1/32 pixel), so it agrees with the NumPy path to a
few 1e-5 in ``s`` (test_ttc.py). The first residuals' median and MAD are exact selections by histogram
rounds (:func:`_select`).

Compiled (or loaded from the cache folder, libredgetpu_ros.jit) by :func:`warm_up` when a scale-mode
detector opens.
"""

from __future__ import annotations

import math

import numpy as np

from libredgetpu_ros import jit


def _requantize_all(values, scale, zero):  # pragma: no cover - compiled
    """:func:`_requantize` over an array, in place: one vectorised pass (the divisions and roundings of
    independent values overlap instead of waiting on each other)."""
    for i in range(values.size):
        q = np.rint(values[i] / scale) + zero
        values[i] = (min(127.0, max(-128.0, q)) - zero) * scale


def border_correction(image, index, zero_taps, zone, taps, quant, pool, raw, zero, scale,
                      out):  # pragma: no cover - compiled
    """``out`` (float32, zones): the device's zones dequantized from ``raw`` (``(q - zero) · scale`` in
    float32, looming_border.dequantize) minus what the zero padding adds to each zone's mean energy, floored
    at 0. The correction sums, over the ring pixels of the flat frame ``image`` (``index[k, t]``: tap t's
    flat index with the border repeated; ``zero_taps[k, t]``: each branch's tap weight with the zero
    padding, 0 outside the frame; ``zone[k]`` the pixel's zone), the device's quantized energy with the zero
    padding minus that with the border repeated; ``taps`` (9, 2): the two Sobel kernels in real units;
    ``quant`` (5, 2): (scale, zero) after each branch's conv, after each square, after their sum. Both
    paddings sum the 9 taps in tap order (a tap outside the frame adds 0 with the zero padding), as the
    NumPy path does; the requantizations then run as whole-array passes, value by value the NumPy path's
    arithmetic."""
    ring = index.shape[0]
    grads = np.empty((2, 2, ring))  # [branch, padding (0: zero, 1: border repeated), ring pixel]
    for k in range(ring):
        zero_x = zero_y = edge_x = edge_y = 0.0
        for t in range(9):
            value = np.float64(image[index[k, t]])
            zero_x += value * zero_taps[k, t, 0]
            zero_y += value * zero_taps[k, t, 1]
            edge_x += value * taps[t, 0]
            edge_y += value * taps[t, 1]
        grads[0, 0, k], grads[0, 1, k], grads[1, 0, k], grads[1, 1, k] = zero_x, edge_x, zero_y, edge_y
    energy = np.zeros((2, ring))
    for branch in range(2):
        values = grads[branch].reshape(-1)
        _requantize_all(values, quant[branch, 0], quant[branch, 1])
        for i in range(values.size):
            values[i] *= values[i]
        _requantize_all(values, quant[2 + branch, 0], quant[2 + branch, 1])
        energy += grads[branch]
    _requantize_all(energy.reshape(-1), quant[4, 0], quant[4, 1])
    correction = np.zeros(out.size)
    for k in range(ring):
        correction[zone[k]] += energy[0, k] - energy[1, k]
    for z in range(out.size):
        level = (np.float32(raw[z]) - zero) * scale
        out[z] = max(level - np.float32(correction[z] / (pool * pool)), np.float32(0.0))


def _reflect101(i, n):  # pragma: no cover - compiled
    """Index ``i`` (less than ``n`` outside) folded into [0, n): OpenCV's default border, reflect 101."""
    if i < 0:
        return -i
    return 2 * n - i - 2 if i >= n else i


def smooth(gray, taps, image, grad_x, grad_y, y0, x0, side):  # pragma: no cover - compiled
    """flow_refine.smooth into the caller's arrays: ``image`` = ``gray`` (uint8 or float32) blurred by the
    separable 9 ``taps`` (cv2.GaussianBlur's kernel at sigma 1), ``grad_x``, ``grad_y`` = its 3×3 Sobel / 8,
    OpenCV's default border (reflect 101) for both; float32 (OpenCV sums in another order: ~2e-7
    relative, test_ttc.py). Returns the texture of the ``side``² window at (y0, x0): the mean of gx² + gy²
    there (ttc.py reads it when this frame becomes a reference). Each output row is one loop over row
    slices with range indices (no negative-index check) and the taps as scalars: it vectorises, and a row
    costs one loop, not one per tap; only the border columns of the gradients are done one by one."""
    h, w = gray.shape
    t0, t1, t2, t3, t4, t5, t6, t7, t8 = taps[0], taps[1], taps[2], taps[3], taps[4], taps[5], taps[6], \
        taps[7], taps[8]
    across = np.empty((h, w), np.float32)  # the horizontal pass
    row = np.empty(w + 8, np.float32)
    for y in range(h):
        src, body = gray[y], row[4:4 + w]
        for x in range(w):
            body[x] = src[x]
        for k in range(1, 5):
            row[4 - k] = src[k]
            row[3 + w + k] = src[w - 1 - k]
        a0, a1, a2, a3, a4, a5, a6, a7, a8 = row[0:w], row[1:w + 1], row[2:w + 2], row[3:w + 3], \
            row[4:w + 4], row[5:w + 5], row[6:w + 6], row[7:w + 7], row[8:w + 8]
        out = across[y]
        for x in range(w):
            out[x] = (t0 * a0[x] + t1 * a1[x] + t2 * a2[x] + t3 * a3[x] + t4 * a4[x] + t5 * a5[x]
                      + t6 * a6[x] + t7 * a7[x] + t8 * a8[x])
    for y in range(h):
        a0, a1, a2 = across[_reflect101(y - 4, h)], across[_reflect101(y - 3, h)], \
            across[_reflect101(y - 2, h)]
        a3, a4, a5 = across[_reflect101(y - 1, h)], across[y], across[_reflect101(y + 1, h)]
        a6, a7, a8 = across[_reflect101(y + 2, h)], across[_reflect101(y + 3, h)], \
            across[_reflect101(y + 4, h)]
        out = image[y]
        for x in range(w):
            out[x] = (t0 * a0[x] + t1 * a1[x] + t2 * a2[x] + t3 * a3[x] + t4 * a4[x] + t5 * a5[x]
                      + t6 * a6[x] + t7 * a7[x] + t8 * a8[x])
    two, eighth = np.float32(2.0), np.float32(0.125)
    for y in range(h):
        up, mid, down = image[_reflect101(y - 1, h)], image[y], image[_reflect101(y + 1, h)]
        ul, ur, ml, mr, dl, dr = up[0:w - 2], up[2:w], mid[0:w - 2], mid[2:w], down[0:w - 2], down[2:w]
        um, dm = up[1:w - 1], down[1:w - 1]
        gx, gy = grad_x[y, 1:w - 1], grad_y[y, 1:w - 1]
        for x in range(w - 2):
            gx[x] = ((ur[x] - ul[x]) + two * (mr[x] - ml[x]) + (dr[x] - dl[x])) * eighth
            gy[x] = ((dl[x] - ul[x]) + two * (dm[x] - um[x]) + (dr[x] - ur[x])) * eighth
        for x in (0, w - 1):
            left, right = _reflect101(x - 1, w), _reflect101(x + 1, w)
            grad_x[y, x] = ((up[right] - up[left]) + two * (mid[right] - mid[left])
                            + (down[right] - down[left])) * eighth
            grad_y[y, x] = ((down[left] - up[left]) + two * (down[x] - up[x]) + (down[right] - up[right])) \
                * eighth
    total = np.float32(0.0)  # the window's texture, while its gradients are at hand
    for y in range(y0, y0 + side):
        gx, gy = grad_x[y, x0:x0 + side], grad_y[y, x0:x0 + side]
        for x in range(side):
            total += gx[x] * gx[x] + gy[x] * gy[x]
    return total / (side * side)


def _reflect(i, n):  # pragma: no cover - compiled
    """Index ``i`` folded into [0, n) as OpenCV's BORDER_REFLECT (``fedcba|abcdefgh|hgfedcb``), any ``i``."""
    i %= 2 * n  # the pattern repeats every 2 n (non-negative remainder, as Python's)
    return 2 * n - i - 1 if i >= n else i


def _solve(matrix, rhs, out):  # pragma: no cover - compiled
    """``out`` = ``matrix⁻¹ rhs`` (Gaussian elimination with partial pivoting, in place: ``matrix`` and
    ``rhs`` are overwritten); False when a pivot is zero (np.linalg.solve's LinAlgError)."""
    n = rhs.size
    m, v = matrix, rhs
    for col in range(n):
        pivot = col
        for row in range(col + 1, n):
            if abs(m[row, col]) > abs(m[pivot, col]):
                pivot = row
        if m[pivot, col] == 0.0:
            return False
        if pivot != col:
            for k in range(n):
                m[col, k], m[pivot, k] = m[pivot, k], m[col, k]
            v[col], v[pivot] = v[pivot], v[col]
        for row in range(col + 1, n):
            f = m[row, col] / m[col, col]
            for k in range(col, n):
                m[row, k] -= f * m[col, k]
            v[row] -= f * v[col]
    for row in range(n - 1, -1, -1):
        acc = v[row]
        for k in range(row + 1, n):
            acc -= m[row, k] * out[k]
        out[row] = acc / m[row, row]
    return True


_BINS = 256  # histogram bins per round of the selection (a bin index fits a uint8)


def _select(values, n, k, spare, bins, counts):  # pragma: no cover - compiled
    """The ``k``-th smallest of ``values[:n]`` (float32, finite), exactly, by histogram rounds: count the
    values into ``_BINS`` bins (monotonic in the value; the first round over the mean ± 4 standard
    deviations, the values beyond in the end bins, later ones over [min, max] of what is left), keep the
    bin holding rank ``k``, until at most 16 are left, sorted then. A round over [min, max] keeps fewer (the
    min and the max fall in different bins; if rounding says otherwise, the rest is sorted). Counting is
    branch-free and keeping a bin mostly skips values: a selection by comparisons (quickselect)
    mispredicts a branch on about every other value of new data, several times the cost. ``values`` and
    ``spare`` (n) are overwritten; ``bins`` (n, uint8) and ``counts`` (4 _BINS, int32: four interleaved
    histograms, so that equal neighbours do not wait on each other's count) are scratch."""
    src, dst = values, spare
    first = True
    while n > 16:
        lo = hi = 0.0
        if first:  # sums vectorise where a min and a max do not
            total = squares = 0.0
            for i in range(n):
                total += src[i]
                squares += np.float64(src[i]) * src[i]
            mean = total / n
            spread = 4.0 * math.sqrt(max(squares / n - mean * mean, 0.0))
            lo, hi = mean - spread, mean + spread
        if not hi > lo:
            lo = hi = np.float64(src[0])
            for i in range(n):
                lo = min(lo, np.float64(src[i]))
                hi = max(hi, np.float64(src[i]))
            if lo == hi:
                return src[0]
        width, lo32 = np.float32(min(_BINS / (hi - lo), 1e30)), np.float32(lo)
        top, none = np.float32(_BINS - 1), np.float32(0.0)
        for i in range(n):
            bins[i] = np.uint8(min(max((src[i] - lo32) * width, none), top))
        counts[:] = 0
        for i in range(n):
            counts[(np.uint32(bins[i]) << np.uint32(2)) | np.uint32(i & 3)] += 1
        chosen, below = 0, 0
        while True:
            at = 4 * chosen
            here = counts[at] + counts[at + 1] + counts[at + 2] + counts[at + 3]
            if below + here > k:
                break
            below += here
            chosen += 1
        kept, bin8 = 0, np.uint8(chosen)
        for i in range(n):
            if bins[i] == bin8:
                dst[kept] = src[i]
                kept += 1
        if kept == n and not first:
            break
        n, k, first = kept, k - below, False
        src, dst = dst, src
    for i in range(1, n):  # insertion sort of the last few
        value, j = src[i], i - 1
        while j >= 0 and src[j] > value:
            src[j + 1] = src[j]
            j -= 1
        src[j + 1] = value
    return src[k]


def _sample(axis, scale, shift, centre, size, first, low, high, frac):  # pragma: no cover - compiled
    """Per window column (or row) ``i``: the source position ``scale · (first + i - centre) + centre +
    shift`` as its two neighbours ``low[i]``, ``high[i]`` (unsigned: indexing with them needs no
    negative-index check, so the warp's loop vectorises; BORDER_REFLECT outside the frame) and ``frac[i]``,
    the bilinear weight of the second. The warp is separable (a scale and a shift per axis), so a
    Gauss-Newton step computes this once per column and once per row instead of once per pixel."""
    for i in range(axis):
        position = scale * (first + i - centre) + centre + shift
        floor = math.floor(position)
        frac[i] = position - floor
        if 0 <= floor < size - 1:
            low[i], high[i] = floor, floor + 1
        else:
            low[i], high[i] = _reflect(floor, size), _reflect(floor + 1, size)


def _blend(top, bottom, fy, out):  # pragma: no cover - compiled
    """``out`` = rows ``top`` and ``bottom`` blended at weight ``fy`` (the vertical half of a bilinear
    sample, for every column of a row at once): the image and both gradients are warped by this and
    :func:`_lerp`."""
    for x in range(out.size):
        out[x] = top[x] + fy * (bottom[x] - top[x])


def _lerp(row, p, q, fx):  # pragma: no cover - compiled
    """The horizontal half: ``row`` between columns ``p`` and ``q`` at weight ``fx``."""
    return row[p] + fx * (row[q] - row[p])


def register_scale(ref, cur, grad_x, grad_y, half, iterations, start):  # pragma: no cover - compiled
    """robotics/ttc.py ``register_scale`` in two passes per Gauss-Newton step: the similarity warp (scale
    about the image centre, translation, gain, bias) of ``ref``'s centre window onto ``cur`` (``grad_x``,
    ``grad_y``: its Sobel gradients / 8), Tukey-weighted with the first residuals' MAD as the yardstick.
    Starts from ``s - 1 = start``, no shift, no lighting change. Returns (s - 1, its standard error,
    residual RMS / window std, share of weight kept). Bilinear sampling with exact weights and
    BORDER_REFLECT outside the frame (OpenCV's remap rounds to 1/32 pixel); per-pixel values in float32,
    the normal equations summed in float32 lanes, solved in float64."""
    h, w = ref.shape
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    y0, x0 = int(cy - half + 0.5), int(cx - half + 0.5)
    side = 2 * half + 1
    n = side * side
    t = np.empty(n, np.float32)
    xs = np.empty(n, np.float32)  # window pixels from the image centre
    ys = np.empty(n, np.float32)
    total = 0.0
    for j in range(side):
        at = j * side
        row, tj, xj, yj = ref[y0 + j, x0:x0 + side], t[at:at + side], xs[at:at + side], ys[at:at + side]
        for i in range(side):
            tj[i] = row[i]
            xj[i] = x0 + i - cx
            yj[i] = y0 + j - cy
            total += row[i]
    mean = total / n
    spread = 0.0
    for k in range(n):
        spread += (t[k] - mean) ** 2
    std = math.sqrt(spread / n)
    if std == 0.0:
        std = 1.0
    a, tx, ty, gain, bias = start, 0.0, 0.0, 1.0, 0.0
    yardstick = -1.0
    residual = np.empty(n, np.float32)
    wx = np.empty(n, np.float32)
    wy = np.empty(n, np.float32)
    weight = np.empty(n, np.float32)
    spare, bins, counts = np.empty(n, np.float32), np.empty(n, np.uint8), np.empty(4 * _BINS, np.int32)
    col_low, col_high = np.empty(side, np.uint32), np.empty(side, np.uint32)
    row_low, row_high = np.empty(side, np.uint32), np.empty(side, np.uint32)
    col_frac, row_frac = np.empty(side, np.float32), np.empty(side, np.float32)
    blend_i, blend_x, blend_y = np.empty(w, np.float32), np.empty(w, np.float32), np.empty(w, np.float32)
    normal, damped = np.zeros((5, 5)), np.empty((5, 5))
    rhs, step = np.zeros(5), np.zeros(5)
    one, zero = np.float32(1.0), np.float32(0.0)
    for _ in range(iterations):
        _sample(side, 1.0 + a, tx, cx, w, x0, col_low, col_high, col_frac)
        _sample(side, 1.0 + a, ty, cy, h, y0, row_low, row_high, row_frac)
        g32, b32 = np.float32(gain), np.float32(bias)
        for j in range(side):
            r0, r1, fy, at = row_low[j], row_high[j], row_frac[j], j * side
            # the two source rows blended first (contiguous, vectorised), then two gathers a pixel, not four
            _blend(cur[r0], cur[r1], fy, blend_i)
            _blend(grad_x[r0], grad_x[r1], fy, blend_x)
            _blend(grad_y[r0], grad_y[r1], fy, blend_y)
            res, dx, dy, tj = residual[at:at + side], wx[at:at + side], wy[at:at + side], t[at:at + side]
            for i in range(side):
                p, q, fx = col_low[i], col_high[i], col_frac[i]
                res[i] = _lerp(blend_i, p, q, fx) - (g32 * tj[i] + b32)
                dx[i] = _lerp(blend_x, p, q, fx)
                dy[i] = _lerp(blend_y, p, q, fx)
        if yardstick < 0.0:  # robust scale of the first residuals (MAD), kept: the weights' yardstick
            for k in range(n):
                weight[k] = residual[k]  # scratch until the weights are made
            centre = _select(weight, n, n // 2, spare, bins, counts)  # the median (n is odd)
            for k in range(n):
                weight[k] = abs(residual[k] - centre)
            yardstick = max(1.4826 * _select(weight, n, n // 2, spare, bins, counts), 0.5)
        cutoff = np.float32(1.0 / (4.685 * max(yardstick, 1e-6)))
        # the normal equations' upper triangle and right-hand side, as scalars (registers, not memory)
        n00 = n01 = n02 = n03 = n04 = n11 = n12 = n13 = n14 = n22 = n23 = n24 = n33 = n34 = n44 = zero
        b0 = b1 = b2 = b3 = b4 = zero
        for k in range(n):
            u = residual[k] * cutoff
            wk = max(one - u * u, zero)
            wk = wk * wk
            weight[k] = wk
            j1, j2, j3 = wx[k], wy[k], -t[k]  # j4 = -1
            j0 = j1 * xs[k] + j2 * ys[k]
            r = residual[k]
            w0, w1, w2, w3 = wk * j0, wk * j1, wk * j2, wk * j3
            n00 += w0 * j0
            n01 += w0 * j1
            n02 += w0 * j2
            n03 += w0 * j3
            n04 -= w0
            n11 += w1 * j1
            n12 += w1 * j2
            n13 += w1 * j3
            n14 -= w1
            n22 += w2 * j2
            n23 += w2 * j3
            n24 -= w2
            n33 += w3 * j3
            n34 -= w3
            n44 += wk
            b0 -= w0 * r
            b1 -= w1 * r
            b2 -= w2 * r
            b3 -= w3 * r
            b4 += wk * r
        upper = ((n00, n01, n02, n03, n04), (zero, n11, n12, n13, n14), (zero, zero, n22, n23, n24),
                 (zero, zero, zero, n33, n34), (zero, zero, zero, zero, n44))
        for p in range(5):
            for q in range(p, 5):
                normal[p, q] = normal[q, p] = upper[p][q]
        rhs[0], rhs[1], rhs[2], rhs[3], rhs[4] = b0, b1, b2, b3, b4
        damped[:, :] = normal
        for p in range(5):
            damped[p, p] += 1e-9
        if not _solve(damped, rhs, step):
            return 0.0, math.inf, math.inf, 0.0
        a, tx, ty = a + step[0], tx + step[1], ty + step[2]
        gain, bias = gain + step[3], bias + step[4]
        if not (abs(a) <= 0.9 and abs(tx) <= half and abs(ty) <= half):  # NaN included
            return a, math.inf, math.inf, 0.0
        if abs(step[0]) < 1e-4 and abs(step[1]) < 1e-2 and abs(step[2]) < 1e-2:
            break
    kept = zero
    weighted = zero
    for k in range(n):
        kept += weight[k]
        weighted += weight[k] * residual[k] * residual[k]
    var = weighted / max(kept - 5.0, 1.0)
    rhs[:] = 0.0
    rhs[0] = 1.0  # the first column of the inverse: its first entry is the variance factor of s - 1
    sigma_a = math.sqrt(max(var * step[0], 0.0)) if _solve(normal, rhs, step) else math.inf
    return a, sigma_a, math.sqrt(var) / std, kept / n


_EXACT = {"cache": True, "nogil": True}
_SUMS = dict(_EXACT, fastmath={"reassoc", "contract"})  # vectorised sums, NaN kept
KERNELS = (("_requantize_all", dict(_EXACT, inline="always")), ("border_correction", _EXACT),
           ("_reflect101", dict(_EXACT, inline="always")), ("smooth", _SUMS),
           ("_reflect", dict(_EXACT, inline="always")), ("_solve", _EXACT), ("_select", _SUMS),
           ("_sample", dict(_EXACT, inline="always")), ("_blend", dict(_SUMS, inline="always")),
           ("_lerp", dict(_SUMS, inline="always")),
           ("register_scale", _SUMS))


def warm_up() -> bool:
    """Import numba, compile (or load) the kernels and run them once for every argument type a frame brings
    (the frame and the device's output each writable or a read-only view: a ROS image at the template's
    size, an Edge TPU output); False without numba (NumPy path)."""
    if not jit.compile_kernels(globals(), KERNELS):
        return False
    zone, index, weights = np.zeros(1, np.int64), np.zeros((1, 9), np.uint32), np.zeros((1, 9, 2))
    frame, raw = np.zeros(16, np.uint8), np.zeros(1, np.uint8)
    for image in (frame, jit.read_only(frame)):
        for output in (raw, jit.read_only(raw)):
            border_correction(image, index, weights, zone, np.zeros((9, 2)), np.ones((5, 2)), 1, output,
                              np.float32(0.0), np.float32(1.0), np.zeros(1, np.float32))
    image = np.zeros((16, 16), np.float32)
    taps = np.ones(9, np.float32)
    for gray in (np.zeros((16, 16), np.uint8), image):  # the template's input (maybe a message's view)
        for kind in (gray, jit.read_only(gray)):
            smooth(kind, taps, image.copy(), image.copy(), image.copy(), 2, 2, 9)
    register_scale(image, image, image, image, 4, 1, 0.0)
    return True
