"""The spot validity check (robotics/spot_validity.py) in one compiled pass (numba); NumPy's is the reference.

The NumPy check makes ~40 array calls on a 64×64 frame (response, median, softmax, connected components,
dilation: ~130-150 µs, most of it call overhead and a full sort for the median). Here the same numbers come
from one kernel, because the response is int8: every per-cell quantity (real value, softmax weight, what
the device's int8 output keeps of it) depends on the cell's level only, so a 256-bin histogram gives the
median and the kept mass, and the target region is a flood fill from the peak over the cells above the
threshold (8-connected, as ``cv2.connectedComponents``) instead of labelling the whole frame. The loops are
written so LLVM vectorizes them (the histogram counts eight far-apart stretches of the frame in eight
tables, so equal neighbouring cells do not wait on one counter; the peak's first cell is searched 64 cells
at a time; the rival is a branch-free maximum), and the kernel ends with the decision itself
(:func:`decide`, which the NumPy path calls as plain Python): a frame costs one call.

Same arithmetic as the NumPy path where it decides anything: the response quantized in float32 with the
same operations, the threshold compared in float32 (NumPy compares a float32 array with a Python float in
float32; here as the lowest level whose real value reaches it, the same cells since the real value grows
with the level), the median's two middle values averaged in float32 (``np.median`` of float32); the mass
sums the same float64 terms in another order and leaves out the levels more than ``SKIPPED_BELOW`` (50)
logits under the peak: each of those weighs less than e^-50 of the peak's own weight of 1, so all of them
together (at most 16,384 cells × e^-50 ≈ 3e-18 of the sum) move the sum by less than its rounding step and
their own int8 share rounds to 0 either way (~1e-16 apart, as the reordering). ``test_spot_validity.py``
checks kernel and NumPy path give the same evidence. Compiled (or loaded from the cache folder,
libredgetpu_ros.jit) by :func:`warm_up` when a checked tracker opens.

``evidence(fitted, real_of, consts, exps)``: ``fitted`` the (H, W, C) uint8 template input, C-contiguous;
``real_of`` the real value (float32) of each response level (int8 value + 128); ``consts`` float64, laid out
as the ``C_*`` indices below (:func:`pack`); ``exps`` the template's softmax weights (:func:`exp_table`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from libredgetpu_ros import jit

# the reasons, in the order they are tested (robotics/spot_validity.py); the kernel returns the index
REASONS = ("ok", "no_target", "target_too_large", "ambiguous", "spread")
OK, NO_TARGET, TARGET_TOO_LARGE, AMBIGUOUS, SPREAD = range(5)
SKIPPED_BELOW = 50.0  # the mass leaves out levels whose softmax logit is this far under the peak's

# consts: one float64 array per (filter, limits), so a frame passes two arrays besides the image
(C_COLOUR, C_W0, C_W1, C_W2, C_IN_SCALE, C_IN_ZERO, C_BETA, C_OUT_SCALE, C_OUT_ZERO, C_MIN_CONTRAST,
 C_MAX_COVERAGE, C_MIN_MARGIN, C_MIN_MASS, C_OPPONENT, C_SIZE) = range(15)


def pack(weights: np.ndarray | None, in_scale: float, in_zero: int, beta: float, out_scale: float,
         out_zero: int, limits: tuple[float, float, float, float], opponent: bool) -> np.ndarray:
    """The ``consts`` array of :func:`evidence` (read-only: one is shared by every frame of a filter).
    ``weights``: the filter's three real weights as float32 (None: the bright variant, luma);
    ``in_scale`` is used as float32 (the response's scale, as the NumPy path uses it); ``limits``
    (min_contrast, max_coverage, min_margin, min_mass)."""
    consts = np.zeros(C_SIZE, np.float64)
    if weights is not None:
        consts[C_COLOUR] = 1.0
        consts[C_W0:C_W2 + 1] = np.asarray(weights, np.float32).reshape(3)  # float32 values, exact in float64
    consts[C_IN_SCALE] = np.float32(in_scale)
    consts[C_IN_ZERO], consts[C_BETA] = in_zero, beta
    consts[C_OUT_SCALE], consts[C_OUT_ZERO] = out_scale, out_zero
    consts[C_MIN_CONTRAST:C_MIN_MASS + 1] = limits
    consts[C_OPPONENT] = 1.0 if opponent else 0.0
    consts.setflags(write=False)
    return consts


def colour_levels(flat, consts, levels):  # pragma: no cover - compiled
    """``levels[i]``: cell i's response ``ReLU(Σ w·rgb)`` requantized as ``SpotValidity.response`` does, in
    float32, as an index 0..255 (int8 value + 128)."""
    w0, w1, w2 = np.float32(consts[C_W0]), np.float32(consts[C_W1]), np.float32(consts[C_W2])
    in_scale, in_zero = np.float32(consts[C_IN_SCALE]), np.float32(consts[C_IN_ZERO])
    for i in range(levels.size):
        acc = (np.float32(flat[3 * i]) * w0 + np.float32(flat[3 * i + 1]) * w1
               + np.float32(flat[3 * i + 2]) * w2)
        value = max(acc, np.float32(0.0)) / in_scale + np.float32(0.5)
        # the int8 value clipped and shifted to 0..255 in float32 (integers, exact), converted once
        level = min(np.float32(255.0), np.floor(value) + in_zero + np.float32(128.0))
        levels[i] = np.uint8(max(np.float32(0.0), level))


def decide(peak, base, mass, coverage, rival, has_rival, opponent, min_contrast, max_coverage, min_margin,
           min_mass):  # pragma: no cover - compiled (and plain Python for the NumPy path)
    """(reason index, coverage, contrast, margin) from what was measured (spot_validity's module docstring,
    in its order). ``coverage`` is not measured (0) when the contrast is below ``min_contrast``."""
    contrast = peak - base
    # an opponent filter (weights summing to <= 0: red, green, ...) responds to the colour, not to light:
    # a median cell that responds means most of the frame has the colour
    colour_floor = opponent and base >= min_contrast
    if contrast < min_contrast:
        # a uniform colour frame has no contrast but is all target
        if colour_floor:
            return TARGET_TOO_LARGE, 1.0, contrast, 0.0
        return NO_TARGET, 0.0, contrast, 0.0
    margin = peak - (rival if has_rival else base)
    if colour_floor or coverage >= max_coverage:
        reason = TARGET_TOO_LARGE
    elif margin < min_margin:
        reason = AMBIGUOUS
    elif mass < min_mass:
        reason = SPREAD
    else:
        reason = OK
    return reason, coverage, contrast, margin


def measure(levels, h, w, real_of, consts, exps):  # pragma: no cover - compiled
    """(peak, median, mass, coverage, rival, has_rival) of one frame's response levels (module docstring):
    ``rival`` is the strongest response outside the target region grown by one cell; coverage and rival
    are not computed (0, False) when the peak is less than the minimum contrast over the median."""
    n = h * w
    # the histogram: eight stretches of the frame in eight tables (equal neighbours do not chain on one
    # counter)
    tables = np.zeros(8 * 256, np.int32)
    part = np.uint64(n // 8)
    p2 = part + part
    p3 = p2 + part
    p4 = p2 + p2
    p5, p6, p7 = p2 + p3, p3 + p3, p3 + p4
    for i in range(part):  # unsigned indices: no negative-index check per access
        i = np.uint64(i)
        tables[np.uint64(levels[i])] += 1
        tables[np.uint64(256) + levels[i + part]] += 1
        tables[np.uint64(512) + levels[i + p2]] += 1
        tables[np.uint64(768) + levels[i + p3]] += 1
        tables[np.uint64(1024) + levels[i + p4]] += 1
        tables[np.uint64(1280) + levels[i + p5]] += 1
        tables[np.uint64(1536) + levels[i + p6]] += 1
        tables[np.uint64(1792) + levels[i + p7]] += 1
    for i in range(8 * (n // 8), n):
        tables[levels[i]] += 1
    counts = np.zeros(256, np.int32)
    for t in range(8):
        for level in range(256):
            counts[level] += tables[256 * t + level]
    top = 255
    while counts[top] == 0:
        top -= 1
    # the first cell at the highest level, as np.argmax: 64 cells counted at once (vectorized) until a
    # stretch has it, then its cells
    peak_at = 0
    while peak_at + 64 <= n:
        found = 0
        for i in range(peak_at, peak_at + 64):
            found += np.int32(levels[i] == top)
        if found:
            break
        peak_at += 64
    while levels[peak_at] != top:
        peak_at += 1
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
    # the softmax over the cells and what the device's int8 output keeps of each weight (once per level),
    # from the peak down to SKIPPED_BELOW logits under it (real_of grows with the level); the weights are
    # the peak's row of the template's table (exp_table: the same math.exp of the same logits)
    beta = np.float32(consts[C_BETA])
    out_scale, out_zero = consts[C_OUT_SCALE], consts[C_OUT_ZERO]
    weight = exps[top]
    total = 0.0
    last = int(top)
    for level in range(int(top), -1, -1):
        logit = np.float64(beta * (real_of[level] - peak))
        if logit < -SKIPPED_BELOW:
            break
        last = level
        if counts[level]:
            total += counts[level] * weight[level]
    mass = 0.0
    for level in range(last, int(top) + 1):
        if counts[level]:
            kept = min(127.0, max(-128.0, math.floor(weight[level] / total / out_scale + 0.5) + out_zero))
            mass += counts[level] * (kept - out_zero)
    mass *= out_scale
    contrast = np.float64(peak) - np.float64(base)
    if contrast < consts[C_MIN_CONTRAST]:
        return np.float64(peak), np.float64(base), mass, 0.0, 0.0, False
    threshold = np.float32(np.float64(base) + contrast / 2.0)
    low = int(top)  # the lowest level at or above the threshold
    while low > 0 and real_of[low - 1] >= threshold:
        low -= 1
    # the region: 8-connected cells at or above the threshold, flood-filled from the peak (mark 1); every
    # neighbour of a region cell is looked at once there, so the ones below the threshold are the cells next
    # to the region (mark 2: the region's own blurred edge is not a rival)
    mark = np.zeros(n, np.uint8)
    ys, xs = np.empty(n, np.int32), np.empty(n, np.int32)  # the region's cells (no division per cell)
    ys[0], xs[0] = peak_at // w, peak_at % w
    mark[peak_at] = 1
    done, cells, ring = 0, 1, 0  # [:cells]: the region's cells found so far, [done:cells] not yet grown
    while done < cells:
        y, x = ys[done], xs[done]
        done += 1
        for ny in range(max(0, y - 1), min(h, y + 2)):
            for nx in range(max(0, x - 1), min(w, x + 2)):
                j = ny * w + nx
                if mark[j] == 0:
                    if levels[j] >= low:
                        mark[j] = 1
                        ys[cells], xs[cells] = ny, nx
                        cells += 1
                    else:
                        mark[j] = 2
                        ring += 1
    if cells + ring == n:
        return np.float64(peak), np.float64(base), mass, cells / n, 0.0, False
    rival = np.uint8(0)
    for i in range(n):  # branch-free: vectorized
        rival = max(rival, levels[i] if mark[i] == 0 else np.uint8(0))
    return np.float64(peak), np.float64(base), mass, cells / n, np.float64(real_of[rival]), True


def exp_table(real_of, beta):  # pragma: no cover - compiled
    """``exps[top, level]``: the softmax weight of a cell at ``level`` when the peak is at ``top``
    (``math.exp`` of the logit :func:`measure` computes, 0 from ``SKIPPED_BELOW`` logits under the peak
    down), made once per template (256 x 256 float64, 512 KiB): a frame reads the peak's row instead of
    calling ``exp`` once per level near the peak."""
    beta = np.float32(beta)
    exps = np.zeros((256, 256))
    for top in range(256):
        peak = real_of[top]
        for level in range(top, -1, -1):
            logit = np.float64(beta * (real_of[level] - peak))
            if logit < -SKIPPED_BELOW:
                break
            exps[top, level] = math.exp(logit)
    return exps


def evidence(fitted, real_of, consts, exps):  # pragma: no cover - compiled
    """(reason index, coverage, mass, contrast, margin) of one frame (module docstring)."""
    h, w, c = fitted.shape
    flat = fitted.reshape(h * w * c)
    if consts[C_COLOUR] != 0.0:
        levels = np.empty(h * w, np.uint8)
        colour_levels(flat, consts, levels)
        found = measure(levels, h, w, real_of, consts, exps)
    elif c == 1:
        found = measure(flat, h, w, real_of, consts, exps)  # the luma is the level (int8(luma - 128) + 128)
    else:
        found = measure(np.ascontiguousarray(flat[::c]), h, w, real_of, consts, exps)
    peak, base, mass, coverage, rival, has_rival = found
    reason, coverage, contrast, margin = decide(
        peak, base, mass, coverage, rival, has_rival, consts[C_OPPONENT] != 0.0, consts[C_MIN_CONTRAST],
        consts[C_MAX_COVERAGE], consts[C_MIN_MARGIN], consts[C_MIN_MASS])
    return reason, coverage, mass, contrast, margin


KERNELS = (("colour_levels", {"cache": True, "nogil": True}),
           ("decide", {"cache": True, "nogil": True}),
           ("measure", {"cache": True, "nogil": True}),
           ("exp_table", {"cache": True, "nogil": True}),
           ("evidence", {"cache": True, "nogil": True}))


def plain(kernel: Any) -> Any:
    """The Python function of a kernel (numba's dispatcher keeps it as ``py_func``): for the NumPy path,
    which must not compile a new specialization on a frame."""
    return getattr(kernel, "py_func", kernel)


def warm_up() -> bool:
    """Import numba, compile (or load) the kernels and run them once for both variants' dtypes; False
    without numba (the NumPy path is used)."""
    if not jit.compile_kernels(globals(), KERNELS):
        return False
    real_of = jit.read_only(np.zeros(256, np.float32))  # SpotValidity's tables: read-only, as pack's consts
    exps = jit.read_only(exp_table(real_of, 1.0))
    limits = (1.0, 0.25, 1.0, 0.5)
    colour = pack(np.ones(3, np.float32), 1.0, 0, 1.0, 1 / 256, -128, limits, False)
    bright = pack(None, 1.0, 0, 1.0, 1 / 256, -128, limits, False)
    for channels, consts in ((3, colour), (1, bright)):
        frame = np.zeros((4, 4, channels), np.uint8)
        for image in (frame, jit.read_only(frame)):  # a ROS frame at the template's size is read-only
            evidence(image, real_of, consts, exps)
    return True
