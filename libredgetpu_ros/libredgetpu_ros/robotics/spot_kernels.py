"""The spot validity check (robotics/spot_validity.py) in one compiled pass (numba); NumPy's is the reference.

The NumPy check makes ~40 array calls on a 64×64 frame (response, median, softmax, connected components,
dilation: ~130-150 µs, most of it call overhead and a full sort for the median). Here the same numbers come
from one kernel, because the response is int8: every per-cell quantity (real value, softmax weight, what
the device's int8 output keeps of it) depends on the cell's level only, so a 256-bin histogram gives the
peak, the median and the kept mass, and the target region is a flood fill from the peak over the cells
above the threshold (8-connected, as ``cv2.connectedComponents``) instead of labelling the whole frame.

Same arithmetic as the NumPy path where it decides anything: the response quantized in float32 with the
same operations, the threshold compared in float32 (NumPy compares a float32 array with a Python float in
float32), the median's two middle values averaged in float32 (``np.median`` of float32); the mass sums the
same float64 terms in another order (~1e-16 apart). ``test_spot_validity.py`` checks kernel and NumPy path
give the same evidence. Compiled (or loaded from the cache folder, libredgetpu_ros.jit) by :func:`warm_up`
when a checked tracker opens.
"""

from __future__ import annotations

import math

import numpy as np

from libredgetpu_ros import jit


def response_levels(fitted, weights, in_scale, in_zero, levels):  # pragma: no cover - compiled
    """``levels[i]``: the response of cell i as an index 0..255 (int8 value + 128); ``weights`` empty:
    luma (the bright variant), else ``ReLU(Σ w·rgb)`` requantized as ``SpotValidity.response`` does, in
    float32 (``acc / scale + 0.5`` is at least 0.5 there, so truncation is its floor)."""
    h, w, c = fitted.shape
    flat = fitted.reshape(h * w * c)
    if weights.size == 0:
        for i in range(h * w):
            levels[i] = flat[i * c]  # int8(luma - 128) + 128
        return
    w0, w1, w2 = weights[0], weights[1], weights[2]  # a colour template's filter is 1x1x3
    for i in range(h * w):
        acc = (np.float32(flat[3 * i]) * w0 + np.float32(flat[3 * i + 1]) * w1
               + np.float32(flat[3 * i + 2]) * w2)
        value = max(acc, np.float32(0.0)) / in_scale + np.float32(0.5)
        q = np.int32(min(value, np.float32(1024.0))) + in_zero
        levels[i] = min(127, max(-128, q)) + 128


def evidence(fitted, weights, in_scale, in_zero, real_of, beta, out_scale, out_zero,
             min_contrast):  # pragma: no cover - compiled
    """(peak, median, mass, coverage, rival, has_rival) of one frame (see the module docstring):
    ``rival`` is the strongest response outside the target region grown by one cell; coverage and rival
    are not computed (0, False) when the peak is less than ``min_contrast`` over the median."""
    h, w = fitted.shape[0], fitted.shape[1]
    n = h * w
    levels = np.empty(n, np.int32)
    response_levels(fitted, weights, in_scale, in_zero, levels)
    counts = np.zeros(256, np.int64)
    peak_at = 0
    for i in range(n):
        counts[levels[i]] += 1
        if levels[i] > levels[peak_at]:
            peak_at = i  # the first cell at the highest level, as np.argmax
    top = levels[peak_at]
    peak = real_of[top]
    # the median: the two middle values of the sorted cells (one for an odd count), averaged in float32
    lower_rank, upper_rank = (n - 1) // 2, n // 2
    lower = upper = -1
    seen = 0
    for level in range(256):
        seen += counts[level]
        if lower < 0 and seen > lower_rank:
            lower = level
        if seen > upper_rank:
            upper = level
            break
    base = (real_of[lower] + real_of[upper]) / np.float32(2.0)
    # the softmax over the cells and what the device's int8 output keeps of each weight (once per level)
    weight = np.zeros(256)
    total = 0.0
    for level in range(256):
        if counts[level]:
            weight[level] = math.exp(np.float64(np.float32(beta) * (real_of[level] - peak)))
            total += counts[level] * weight[level]
    mass = 0.0
    for level in range(256):
        if counts[level]:
            kept = min(127.0, max(-128.0, math.floor(weight[level] / total / out_scale + 0.5) + out_zero))
            mass += counts[level] * (kept - out_zero)
    mass *= out_scale
    contrast = np.float64(peak) - np.float64(base)
    if contrast < min_contrast:
        return np.float64(peak), np.float64(base), mass, 0.0, 0.0, False
    threshold = np.float32(np.float64(base) + contrast / 2.0)
    # the region: 8-connected cells at or above the threshold, flood-filled from the peak
    region = np.zeros(n, np.uint8)
    stack = np.empty(n, np.int32)
    stack[0] = peak_at
    region[peak_at] = 1
    done, cells = 0, 1  # stack[:cells]: the region's cells found so far, stack[done:cells] not yet grown
    while done < cells:
        i = stack[done]
        done += 1
        y, x = i // w, i % w
        for ny in range(max(0, y - 1), min(h, y + 2)):
            for nx in range(max(0, x - 1), min(w, x + 2)):
                j = ny * w + nx
                if region[j] == 0 and real_of[levels[j]] >= threshold:
                    region[j] = 1
                    stack[cells] = j
                    cells += 1
    # the strongest response outside the region grown by one cell (the region's own blurred edge is not
    # a rival): the region's cells and their 3x3 neighbours marked, then the others scanned
    grown = region.copy()
    for k in range(cells):
        i = stack[k]
        y, x = i // w, i % w
        for ny in range(max(0, y - 1), min(h, y + 2)):
            for nx in range(max(0, x - 1), min(w, x + 2)):
                grown[ny * w + nx] = 1
    rival = -1
    for i in range(n):
        if grown[i] == 0 and levels[i] > rival:
            rival = levels[i]
    if rival < 0:
        return np.float64(peak), np.float64(base), mass, cells / n, 0.0, False
    return np.float64(peak), np.float64(base), mass, cells / n, np.float64(real_of[rival]), True


KERNELS = (("response_levels", {"cache": True, "nogil": True}),
           ("evidence", {"cache": True, "nogil": True}))


def warm_up() -> bool:
    """Import numba, compile (or load) the kernels and run them once for both variants' dtypes; False
    without numba (the NumPy path is used)."""
    if not jit.compile_kernels(globals(), KERNELS):
        return False
    frame = np.zeros((4, 4, 3), np.uint8)
    real_of = np.zeros(256, np.float32)
    for image in (frame, jit.read_only(frame)):  # a ROS rgb8 frame at the template's size is read-only
        for weights in (np.zeros(0, np.float32), np.ones(3, np.float32)):
            evidence(image, weights, np.float32(1.0), 0, real_of, 1.0, 1 / 256, -128, 1.0)
    return True
