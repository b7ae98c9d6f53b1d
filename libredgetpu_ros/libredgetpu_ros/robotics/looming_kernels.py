"""The looming scale mode's CPU work compiled (numba): the border correction (robotics/looming_border.py) and
the scale registration of the time to contact (robotics/ttc.py).

``BorderCorrection`` recomputes the device's quantized Sobel energy at the ~125 (64×64) or ~250 (128×128)
pooled pixels whose 3×3 neighbourhood reaches the padding, once with the device's zero padding and once with
the border repeated. In NumPy that is two padded copies, two gathers, two small matrix products and ~20
array operations per frame (~80 µs at 64×64, nearly all call overhead); here it is one loop over the ring
pixels. Same arithmetic (float64 products and sums, ``np.rint`` half to even, the model's scales and zero
points); the 9-tap sums run in tap order where NumPy's matrix product may not, so a sum can differ in its
last bit (a quantization step flips only if that lands exactly on a half): ``test_ttc.py`` checks kernel and
NumPy path agree.

``register_scale`` is ttc.py's Gauss-Newton registration with each step one pass over the window (warp of the
image and its gradients, residuals, Tukey weights, the 5×5 normal equations) instead of a remap and ~25 array
operations; its sums are float64 (NumPy's are float32) and its bilinear weights exact (OpenCV's remap rounds
the position to 1/32 pixel), so it agrees with the NumPy path to a few 1e-4 in ``s`` (test_ttc.py).

Compiled (or loaded from the cache folder, libredgetpu_ros.jit) by :func:`warm_up` when a scale-mode
detector opens.
"""

from __future__ import annotations

import math

import numpy as np

from libredgetpu_ros import jit


def _requantize(value, scale, zero):  # pragma: no cover - compiled
    """``value`` on the int8 grid of (scale, zero) and back to real units, as the device rounds it."""
    q = np.rint(value / scale) + zero
    return (min(127.0, max(-128.0, q)) - zero) * scale


def border_correction(image, rows, cols, zone, taps, conv_q, square_q, sum_q, pool, out):  # pragma: no cover
    """``out[z]``: what the zero padding adds to zone z's mean energy (subtract it), over the ring pixels
    (``rows``, ``cols``; their zone ``zone``); ``taps`` (9, 2): the two Sobel kernels in real units, tap
    (dy, dx) at 3·dy + dx; ``conv_q``, ``square_q`` (2, 2): each branch's (scale, zero) after the conv and
    after the square; ``sum_q``: (scale, zero) of their sum."""
    h, w = image.shape
    out[:] = 0.0
    for k in range(rows.size):
        r, c = rows[k], cols[k]
        energy_zero = energy_edge = 0.0
        for padding in range(2):  # 0: the device's zero padding, 1: the border repeated
            total = 0.0
            for branch in range(2):
                grad = 0.0
                for dy in range(3):
                    y = r + dy - 1
                    for dx in range(3):
                        x = c + dx - 1
                        if 0 <= y < h and 0 <= x < w:
                            value = image[y, x]
                        elif padding == 0:
                            value = 0.0
                        else:
                            value = image[min(max(y, 0), h - 1), min(max(x, 0), w - 1)]
                        grad += value * taps[3 * dy + dx, branch]
                g_real = _requantize(grad, conv_q[branch, 0], conv_q[branch, 1])
                total += _requantize(g_real * g_real, square_q[branch, 0], square_q[branch, 1])
            energy = _requantize(total, sum_q[0], sum_q[1])
            if padding == 0:
                energy_zero = energy
            else:
                energy_edge = energy
        out[zone[k]] += energy_zero - energy_edge
    for z in range(out.size):
        out[z] /= pool * pool


def _reflect(i, n):  # pragma: no cover - compiled
    """Index ``i`` folded into [0, n) as OpenCV's BORDER_REFLECT (``fedcba|abcdefgh|hgfedcb``), any ``i``."""
    i %= 2 * n  # the pattern repeats every 2 n (non-negative remainder, as Python's)
    return 2 * n - i - 1 if i >= n else i


def _solve(matrix, rhs, out):  # pragma: no cover - compiled
    """``out`` = ``matrix⁻¹ rhs`` (Gaussian elimination with partial pivoting on copies); False when a pivot
    is zero (np.linalg.solve's LinAlgError)."""
    n = rhs.size
    m = matrix.copy()
    v = rhs.copy()
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


def register_scale(ref, cur, grad_x, grad_y, half, iterations, start):  # pragma: no cover - compiled
    """robotics/ttc.py ``register_scale`` in one pass per Gauss-Newton step: the similarity warp (scale
    about the image centre, translation, gain, bias) of ``ref``'s centre window onto ``cur`` (``grad_x``,
    ``grad_y``: its Sobel gradients / 8), Tukey-weighted with the first residuals' MAD as the yardstick.
    Returns (s - 1, its standard error, residual RMS / window std, share of weight kept). Bilinear sampling
    with exact weights and BORDER_REFLECT outside the frame (OpenCV's remap rounds to 1/32 pixel)."""
    h, w = ref.shape
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    y0, x0 = int(cy - half + 0.5), int(cx - half + 0.5)
    side = 2 * half + 1
    n = side * side
    t = np.empty(n)
    total = 0.0
    for j in range(side):
        for i in range(side):
            t[j * side + i] = ref[y0 + j, x0 + i]
            total += ref[y0 + j, x0 + i]
    mean = total / n
    spread = 0.0
    for k in range(n):
        spread += (t[k] - mean) ** 2
    std = math.sqrt(spread / n)
    if std == 0.0:
        std = 1.0
    a, tx, ty, gain, bias = start, 0.0, 0.0, 1.0, 0.0
    yardstick = -1.0
    residual = np.empty(n)
    wx = np.empty(n)
    wy = np.empty(n)
    weight = np.empty(n)
    normal = np.zeros((5, 5))
    rhs = np.zeros(5)
    step = np.zeros(5)
    for _ in range(iterations):
        for j in range(side):
            yc = y0 + j - cy
            my = (1.0 + a) * yc + cy + ty
            fy0 = math.floor(my)
            fy = my - fy0
            r0, r1 = (fy0, fy0 + 1) if 0 <= fy0 < h - 1 else (_reflect(fy0, h), _reflect(fy0 + 1, h))
            for i in range(side):
                xc = x0 + i - cx
                mx = (1.0 + a) * xc + cx + tx
                fx0 = math.floor(mx)
                fx = mx - fx0
                c0, c1 = (fx0, fx0 + 1) if 0 <= fx0 < w - 1 else (_reflect(fx0, w), _reflect(fx0 + 1, w))
                w00, w01, w10, w11 = (1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy
                k = j * side + i
                value = w00 * cur[r0, c0] + w01 * cur[r0, c1] + w10 * cur[r1, c0] + w11 * cur[r1, c1]
                wx[k] = (w00 * grad_x[r0, c0] + w01 * grad_x[r0, c1] + w10 * grad_x[r1, c0]
                         + w11 * grad_x[r1, c1])
                wy[k] = (w00 * grad_y[r0, c0] + w01 * grad_y[r0, c1] + w10 * grad_y[r1, c0]
                         + w11 * grad_y[r1, c1])
                residual[k] = value - (gain * t[k] + bias)
        if yardstick < 0.0:  # robust scale of the first residuals (MAD), kept: the weights' yardstick
            centre = np.median(residual)
            yardstick = max(1.4826 * np.median(np.abs(residual - centre)), 0.5)
        cutoff = 1.0 / (4.685 * max(yardstick, 1e-6))
        # the normal equations' upper triangle and right-hand side, as scalars (registers, not memory)
        n00 = n01 = n02 = n03 = n04 = n11 = n12 = n13 = n14 = n22 = n23 = n24 = n33 = n34 = n44 = 0.0
        b0 = b1 = b2 = b3 = b4 = 0.0
        for j in range(side):
            yc = y0 + j - cy
            for i in range(side):
                k = j * side + i
                u = residual[k] * cutoff
                wk = max(1.0 - u * u, 0.0) ** 2
                weight[k] = wk
                j0 = wx[k] * (x0 + i - cx) + wy[k] * yc
                j1, j2, j3 = wx[k], wy[k], -t[k]  # j4 = -1
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
        upper = ((n00, n01, n02, n03, n04), (0.0, n11, n12, n13, n14), (0.0, 0.0, n22, n23, n24),
                 (0.0, 0.0, 0.0, n33, n34), (0.0, 0.0, 0.0, 0.0, n44))
        for p in range(5):
            for q in range(p, 5):
                normal[p, q] = normal[q, p] = upper[p][q]
        rhs[0], rhs[1], rhs[2], rhs[3], rhs[4] = b0, b1, b2, b3, b4
        damped = normal.copy()
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
    kept = 0.0
    weighted = 0.0
    for k in range(n):
        kept += weight[k]
        weighted += weight[k] * residual[k] * residual[k]
    var = weighted / max(kept - 5.0, 1.0)
    unit = np.zeros(5)
    unit[0] = 1.0
    sigma_a = math.sqrt(max(var * step[0], 0.0)) if _solve(normal, unit, step) else math.inf
    return a, sigma_a, math.sqrt(var) / std, kept / n


def _reflect101(i, n):  # pragma: no cover - compiled
    """Index ``i`` (at most one pixel outside) folded into [0, n): OpenCV's default border, reflect 101."""
    if i < 0:
        return -i
    return 2 * n - i - 2 if i >= n else i


def window_texture(image, y0, x0, side):  # pragma: no cover - compiled
    """Mean of gx² + gy² over the ``side``² window at (y0, x0), the gradients ``cv2.Sobel(window, ksize=3,
    scale=1/8)`` of the window alone (its border reflected, OpenCV's default), as ttc.py measured it."""
    total = 0.0
    for j in range(side):
        ym, yp = _reflect101(j - 1, side) + y0, _reflect101(j + 1, side) + y0
        for i in range(side):
            xm, xp = _reflect101(i - 1, side) + x0, _reflect101(i + 1, side) + x0
            y, x = y0 + j, x0 + i
            gx = ((image[ym, xp] - image[ym, xm]) + 2.0 * (image[y, xp] - image[y, xm])
                  + (image[yp, xp] - image[yp, xm])) / 8.0
            gy = ((image[yp, xm] - image[ym, xm]) + 2.0 * (image[yp, x] - image[ym, x])
                  + (image[yp, xp] - image[ym, xp])) / 8.0
            total += gx * gx + gy * gy
    return total / (side * side)


_EXACT = {"cache": True, "nogil": True}
KERNELS = (("_requantize", dict(_EXACT, inline="always")), ("border_correction", _EXACT),
           ("_reflect", dict(_EXACT, inline="always")), ("_solve", _EXACT),
           ("register_scale", dict(_EXACT, fastmath={"reassoc", "contract"})),
           ("_reflect101", dict(_EXACT, inline="always")), ("window_texture", _EXACT))


def warm_up() -> bool:
    """Import numba, compile (or load) the kernels and run them once; False without numba (NumPy path)."""
    if not jit.compile_kernels(globals(), KERNELS):
        return False
    index = np.zeros(1, np.int64)
    quant = np.ones((2, 2))
    border_correction(np.zeros((4, 4), np.uint8), index, index, index, np.zeros((9, 2)), quant, quant,
                      np.ones(2), 1, np.zeros(1))
    image = np.zeros((16, 16), np.float32)
    register_scale(image, image, image, image, 4, 1, 0.0)
    window_texture(image, 2, 2, 9)
    return True
