"""Compiled kernels of the flow refinement at the frame's resolution (robotics/flow_refine.py), numba.

A frame's levels are one call (``levels``: the frame blurred, its Sobel gradients, and the same for its 2×2
means), a refined peak another (``refine_seed``: Gauss-Newton at both levels and the match score of the
result), so a refined pair costs a handful of Python calls instead of dozens (issue 36).

- ``fine_level``: a level's Gaussian blur (cv2.GaussianBlur's separable taps, OpenCV's order: rows first) and
  3×3 Sobel / 8, reflect-101 borders, float32 as OpenCV computes them (sums in another order: ~1e-7 apart).
  Each output pixel's taps are summed in registers (the loops vectorise), not accumulated tap by tap
  through memory. ``flow_refine.smooth`` uses it.
- ``lk``: Gauss-Newton iterations of the global translation at one level (inverse compositional). A
  translation samples every pixel with the same bilinear weights: the warp is a 2×2 stencil over the moving
  frame's rows and no warped image is made. The Gauss-Newton matrix depends on the template's gradients over
  the overlap only, so it is summed again only when the overlap changes; per row the sums are float32 (the
  loops vectorise without conversions), across rows float64.
- ``match``: the zero-mean normalised cross-correlation of the template and the moving frame sampled at the
  refined translation over their overlap (``ncc.score`` of the warped box, without making it).

Without numba the same steps run in OpenCV and NumPy (robotics/flow_refine.py); ``test_flow_exactness.py``
compares the two.
"""

from __future__ import annotations

import math

import numpy as np

from libredgetpu_ros import jit

NO_OVERLAP, APERTURE, RAN_OUT, CONVERGED = 0, 1, 2, 3  # how a level's iterations ended
# Flat indices into the images are unsigned: numba checks a signed index for a negative value on every
# access (the wrap-around), which keeps the loops from vectorising; slices per row instead cost a
# reference count each. Sums of unsigned with signed integers are floats in numba: every index term is _U.
_U = np.uint64


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


def _pad101(image, r, out):  # pragma: no cover - compiled
    """``out`` = ``image`` (any numeric dtype) with ``r`` pixels of OpenCV's default border (reflect 101) on
    every side."""
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
    """One level of robotics/flow_refine.py: ``image`` = ``gray`` (uint8 or float32) blurred by the separable
    ``taps`` (cv2.GaussianBlur's kernel), ``grad_x``, ``grad_y`` = its 3×3 Sobel / 8, both with OpenCV's
    default border (reflect 101), in float32 as OpenCV computes them (sums in another order: ~1e-7 apart).
    The 9 taps of SMOOTH_SIGMA 1 are summed in registers per pixel (flat unsigned indices, see _U)."""
    h, w = gray.shape
    r = taps.size // 2
    wp = w + 2 * r
    padded = np.empty((h + 2 * r, wp), np.float32)
    _pad101(gray, r, padded)
    across = np.empty((h + 2 * r, w), np.float32)  # the horizontal pass, on every padded row
    n, uw, one = _U(w), _U(w), _U(1)
    if taps.size == 9:
        src, dst = padded.reshape(padded.size), across.reshape(across.size)
        t0, t1, t2, t3, t4 = taps[0], taps[1], taps[2], taps[3], taps[4]
        t5, t6, t7, t8 = taps[5], taps[6], taps[7], taps[8]
        for y in range(h + 2 * r):
            a, b = _U(y * wp), _U(y * w)
            for x in range(n):
                i = a + x
                dst[b + x] = (t0 * src[i] + t1 * src[i + one] + t2 * src[i + _U(2)] + t3 * src[i + _U(3)]
                              + t4 * src[i + _U(4)] + t5 * src[i + _U(5)] + t6 * src[i + _U(6)]
                              + t7 * src[i + _U(7)] + t8 * src[i + _U(8)])
        src, dst = across.reshape(across.size), image.reshape(h * w)
        for y in range(h):
            a = _U(y * w)
            for x in range(n):
                i = a + x
                dst[i] = (t0 * src[i] + t1 * src[i + uw] + t2 * src[i + _U(2) * uw] + t3 * src[i + _U(3) * uw]
                          + t4 * src[i + _U(4) * uw] + t5 * src[i + _U(5) * uw] + t6 * src[i + _U(6) * uw]
                          + t7 * src[i + _U(7) * uw] + t8 * src[i + _U(8) * uw])
    else:  # any other kernel size: tap by tap
        across[:] = 0.0
        for y in range(h + 2 * r):
            row = across[y]
            for k in range(taps.size):
                c, line = taps[k], padded[y, k:k + w]
                for x in range(w):
                    row[x] += c * line[x]
        for y in range(h):
            out = image[y]
            out[:] = 0.0
            for k in range(taps.size):
                c, line = taps[k], across[y + k]
                for x in range(w):
                    out[x] += c * line[x]
    edge = np.empty((h + 2, w + 2), np.float32)
    _pad101(image, 1, edge)
    e, gxf, gyf = edge.reshape(edge.size), grad_x.reshape(h * w), grad_y.reshape(h * w)
    two, eighth, we = np.float32(2.0), np.float32(0.125), _U(w + 2)
    for y in range(h):
        u = _U(y) * we  # the rows above, at and below y, padded
        m = u + we
        d = m + we
        o = _U(y * w)
        for x in range(n):
            ul, um, ur = e[u + x], e[u + x + one], e[u + x + _U(2)]
            dl, dm, dr = e[d + x], e[d + x + one], e[d + x + _U(2)]
            gxf[o + x] = ((ur - ul) + two * (e[m + x + _U(2)] - e[m + x]) + (dr - dl)) * eighth
            gyf[o + x] = ((dl - ul) + two * (dm - um) + (dr - ur)) * eighth


def levels(gray, taps, level0, level1):  # pragma: no cover - compiled
    """A frame's two refinement levels in one call: ``level0`` (3, h, w) = ``gray`` (uint8 or float32)
    through fine_level (image, grad x, grad y); ``level1`` (3, h/2, w/2) the same of its 2×2 means
    (cv2.INTER_AREA's exact halving, in float32). The caller checks that the sizes halve exactly."""
    fine_level(gray, taps, level0[0], level0[1], level0[2])
    h1, w1 = level1.shape[1], level1.shape[2]
    half = np.empty((h1, w1), np.float32)
    quarter = np.float32(0.25)
    for y in range(h1):
        r0, r1, dst = gray[2 * y], gray[2 * y + 1], half[y]
        for x in range(w1):
            dst[x] = (np.float32(r0[2 * x]) + np.float32(r0[2 * x + 1]) + np.float32(r1[2 * x])
                      + np.float32(r1[2 * x + 1])) * quarter
    fine_level(half, taps, level1[0], level1[1], level1[2])


def _hessian(template, y0, y1, x0, x1):  # pragma: no cover - compiled
    """Σ gx², Σ gx·gy, Σ gy² of a (3, h, w) level's gradients over the box (float32 per row, float64 across
    rows)."""
    _, h, w = template.shape
    flat = template.reshape(template.size)
    plane, n = _U(h * w), _U(x1 - x0)
    a = b = c = 0.0
    for y in range(y0, y1):
        row = _U(y * w + x0) + plane
        sa = sb = sc = np.float32(0.0)
        for k in range(n):
            gx, gy = flat[row + k], flat[row + plane + k]
            sa += gx * gx
            sb += gx * gy
            sc += gy * gy
        a += sa
        b += sb
        c += sc
    return a, b, c


def _weights(ux, uy):  # pragma: no cover - compiled
    """(floor of ux, floor of uy, the four bilinear weights in float32) of a translation."""
    ix, iy = math.floor(ux), math.floor(uy)
    fx, fy = np.float32(ux - ix), np.float32(uy - iy)
    one = np.float32(1.0)
    return ix, iy, (one - fx) * (one - fy), fx * (one - fy), (one - fx) * fy, fx * fy


def lk(template, moving, ux, uy, iterations, border, min_det, converged_px):  # pragma: no cover - compiled
    """Gauss-Newton iterations of the global translation at one level (inverse compositional: the Hessian of
    ``template``'s gradients over the overlap, the error of ``moving`` sampled at y + u); ``template`` and
    ``moving`` are (3, h, w) levels. ``(ux, uy, how)`` with ``how`` one of NO_OVERLAP, APERTURE (det <=
    ``min_det`` · a·c), RAN_OUT, CONVERGED (a step under ``converged_px`` on both axes)."""
    _, h, w = template.shape
    flat, frame = template.reshape(template.size), moving.reshape(moving.size)
    plane, uw, one = _U(h * w), _U(w), _U(1)
    box = (-1, -1, -1, -1)
    a = b = c = 0.0
    for _ in range(iterations):
        ok, y0, y1, x0, x1 = overlap(h, w, ux, uy, border)
        if not ok:
            return ux, uy, NO_OVERLAP
        if (y0, y1, x0, x1) != box:
            a, b, c = _hessian(template, y0, y1, x0, x1)
            box = (y0, y1, x0, x1)
        det = a * c - b * b
        if not det > min_det * max(a * c, 1e-30):
            return ux, uy, APERTURE
        ix, iy, w00, w01, w10, w11 = _weights(ux, uy)
        n = _U(x1 - x0)
        ex = ey = 0.0
        for y in range(y0, y1):
            t = _U(y * w + x0)  # the template's row; the moving frame's two rows under it
            m0 = _U((y + iy) * w + x0 + ix)
            m1 = m0 + uw
            sx = sy = np.float32(0.0)
            for k in range(n):
                e = (w00 * frame[m0 + k] + w01 * frame[m0 + k + one] + w10 * frame[m1 + k]
                     + w11 * frame[m1 + k + one] - flat[t + k])
                sx += flat[plane + t + k] * e
                sy += flat[plane + plane + t + k] * e
            ex += sx
            ey += sy
        step_x = (c * ex - b * ey) / det
        step_y = (a * ey - b * ex) / det
        ux, uy = ux - step_x, uy - step_y
        if abs(step_x) < converged_px and abs(step_y) < converged_px:
            return ux, uy, CONVERGED
    return ux, uy, RAN_OUT


def match(template, moving, ux, uy, y0, y1, x0, x1):  # pragma: no cover - compiled
    """Zero-mean NCC of ``template`` and ``moving`` sampled at y + u (bilinear, lk's stencil) over the box
    (which overlap() keeps inside ``moving``); 0 when either is flat (variance <= 1e-6), as ``ncc.score``."""
    w = template.shape[2]
    flat, frame = template.reshape(template.size), moving.reshape(moving.size)
    ix, iy, w00, w01, w10, w11 = _weights(ux, uy)
    n, uw, one = _U(x1 - x0), _U(w), _U(1)
    st = sm = stt = smm = stm = 0.0
    for y in range(y0, y1):
        t = _U(y * w + x0)
        m0 = _U((y + iy) * w + x0 + ix)
        m1 = m0 + uw
        rt = rm = rtt = rmm = rtm = np.float32(0.0)
        for k in range(n):
            v = (w00 * frame[m0 + k] + w01 * frame[m0 + k + one] + w10 * frame[m1 + k]
                 + w11 * frame[m1 + k + one])
            g = flat[t + k]
            rt += g
            rm += v
            rtt += g * g
            rmm += v * v
            rtm += g * v
        st += rt
        sm += rm
        stt += rtt
        smm += rmm
        stm += rtm
    count = (x1 - x0) * (y1 - y0)
    mean_t, mean_m = st / count, sm / count
    var_t, var_m = stt / count - mean_t * mean_t, smm / count - mean_m * mean_m
    if var_t <= 1e-6 or var_m <= 1e-6:
        return 0.0
    return (stm / count - mean_t * mean_m) / math.sqrt(var_t * var_m)


def refine_seed(coarse_t, coarse_m, fine_t, fine_m, ux, uy, iterations_coarse, iterations_fine, border,
                min_det, converged_px):  # pragma: no cover - compiled
    """One seed through both levels (``ux``, ``uy`` in coarse pixels): ``(ux, uy, ncc, how)`` at the fine
    level, ``how`` the fine level's (NO_OVERLAP or APERTURE from either level end it; ``ncc`` is then -1)."""
    ux, uy, how = lk(coarse_t, coarse_m, ux, uy, iterations_coarse, border, min_det, converged_px)
    if how <= APERTURE:  # NO_OVERLAP or APERTURE
        return ux, uy, -1.0, how
    ux, uy, how = lk(fine_t, fine_m, 2.0 * ux, 2.0 * uy, iterations_fine, border, min_det, converged_px)
    if how <= APERTURE:
        return ux, uy, -1.0, how
    ok, y0, y1, x0, x1 = overlap(fine_t.shape[1], fine_t.shape[2], ux, uy, border)
    if not ok:
        return ux, uy, -1.0, NO_OVERLAP
    return ux, uy, match(fine_t, fine_m, ux, uy, y0, y1, x0, x1), how


_EXACT = {"cache": True, "nogil": True}
_SUMS = {"cache": True, "nogil": True, "fastmath": {"reassoc", "contract"}}  # vectorised sums, NaN kept
KERNELS = (("overlap", _EXACT), ("_pad101", _EXACT), ("fine_level", _SUMS), ("levels", _SUMS),
           ("_hessian", _SUMS), ("_weights", _EXACT), ("lk", _SUMS), ("match", _SUMS), ("refine_seed", _SUMS))
_warm = False


def warm_up() -> bool:
    """Compile (or load from the cache folder, libredgetpu_ros.jit) every kernel and run it once for each
    argument type a frame brings (uint8 frames writable and read-only, float32 levels); False without
    numba."""
    global _warm
    if _warm:
        return True
    if not jit.compile_kernels(globals(), KERNELS):
        return False
    taps = np.ones(9, np.float32)
    image = np.zeros((16, 16), np.float32)
    fine_level(image, taps, image.copy(), image.copy(), image.copy())  # flow_refine.smooth
    level0, level1 = np.zeros((3, 16, 16), np.float32), np.zeros((3, 8, 8), np.float32)
    frame = np.zeros((16, 16), np.uint8)
    for gray in (frame, jit.read_only(frame), image):  # a mono8 message at the frame's size stays read-only
        levels(gray, taps, level0, level1)
    refine_seed(level1, level1, level0, level0, 0.5, -0.5, 1, 1, 0, 0.05, 0.01)
    _warm = True
    return True
