"""Sub-grid refinement of the global flow at the camera's resolution, seeded by the device's correlation peak.

The Gabor template sees the frame at 64×64 (or 128×128) and correlates on a grid of 4 model pixels: at 320×240
one grid step is 20 × 15 camera pixels, and a motion of a few camera pixels per frame is a fraction of a step
that the peak interpolation reads short (0.76 of the truth at 2 px/frame, fine textures 0.25-0.42). Here the
CPU finishes the job where the pixels still are: a global-translation Lucas-Kanade (Gauss-Newton on the
grey levels, inverse compositional) on the frames at up to ``FINE_WIDTH`` pixels wide, started at the device's
displacement, coarse-to-fine over two levels. The device keeps the search (it finds the basin, ±search_range
grid steps); the refinement only walks the last fraction of a step, so it needs no search of its own.

What is kept per frame (``FineFrame``): the smoothed grey image at each level and its gradients. A pair costs,
per iteration, one pass over the overlap: the newer frame sampled at the current translation (the same
bilinear weights for every pixel: a 2×2 stencil), the error, and the sums of the Gauss-Newton matrix and
right-hand side (robotics/flow_refine_kernels.py ``refine_seed``: both levels and the match in one compiled
call; without numba the same steps in OpenCV and NumPy, whose warp rounds the sub-pixel shift to 1/32 pixel).

The refinement also says how well the pair matches at the refined displacement: ``ncc``, the normalised
cross-correlation of the two frames over their overlap at the finest level. Motion beyond the device's search
range (the device's peak is then on an unrelated displacement) and an aliased peak on a repeating scene end on
a poor match and are reported as such (``robotics.flow`` decides validity).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import cv2
import numpy as np

from libredgetpu_ros.robotics import flow_kernels, ncc
from libredgetpu_ros.robotics import flow_refine_kernels as kernels

FINE_WIDTH = 160  # frames are refined at most this wide (320×240 -> 160×120): 0.05-px steps at 320
LEVELS = 2  # coarse-to-fine levels (each half the previous width)
ITERATIONS = (4, 4)  # Gauss-Newton iterations per level, coarse first
_COARSE_STEPS, _FINE_STEPS = ITERATIONS[0], ITERATIONS[-1]
SMOOTH_SIGMA = 1.0  # Gaussian blur before gradients (pixels of each level)
CONVERGED_PX = 0.01  # an update smaller than this (level pixels) ends the level
BORDER = 2  # pixels of each level left out along its edges (the blur and gradients see the border there)
MIN_DET = 0.05  # det(H) / (a·c) below this (smallest / largest eigenvalue below ~1/20): an aperture
# cv2.GaussianBlur's float32 kernel at SMOOTH_SIGMA (size round(8 sigma + 1), odd): the compiled blurs'
# (a refinement level's here, the looming TTC's frames' in robotics/ttc.py)
SMOOTH_TAPS = cv2.getGaussianKernel(round(SMOOTH_SIGMA * 8 + 1) | 1, SMOOTH_SIGMA, cv2.CV_32F).ravel()


class FineFrame(NamedTuple):  # made per frame or pair: a named tuple costs a third of a frozen class
    """A frame at the refinement's levels (finest first) and the factor from its pixels to the frame's."""

    levels: tuple[np.ndarray, ...]  # float32 (3, h, w) each: smoothed grey, its gradients x and y
    scale: float  # frame pixels per finest-level pixel


class Refined(NamedTuple):  # made per frame or pair: a named tuple costs a third of a frozen class
    """Refined displacement in frame pixels (content of frame t appears at +(dx, dy) in frame t+1), the
    normalised cross-correlation of the overlap there, and whether the last update was below
    ``CONVERGED_PX``."""

    dx: float
    dy: float
    ncc: float
    converged: bool
    aperture: bool = False  # the overlap has gradients of one orientation only: no 2-D motion in it


def smooth(gray: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``gray`` blurred by a Gaussian of SMOOTH_SIGMA, its Sobel x and y / 8), float32, OpenCV's default
    border: one compiled call (flow_refine_kernels.fine_level) when numba is there, else OpenCV. A
    refinement level and the looming TTC's frames (robotics/ttc.py) are made with it."""
    if flow_kernels.ready() and min(gray.shape) > SMOOTH_TAPS.size // 2:
        image, gx, gy = (np.empty(gray.shape, np.float32) for _ in range(3))
        kernels.fine_level(np.ascontiguousarray(gray, dtype=np.float32), SMOOTH_TAPS, image, gx, gy)
        return image, gx, gy
    image = cv2.GaussianBlur(np.asarray(gray, dtype=np.float32), (0, 0), SMOOTH_SIGMA)
    return (image, cv2.Sobel(image, cv2.CV_32F, 1, 0, ksize=3, scale=0.125),
            cv2.Sobel(image, cv2.CV_32F, 0, 1, ksize=3, scale=0.125))


def _level(gray: np.ndarray) -> np.ndarray:
    return np.stack(smooth(gray))


def _fine_size(w: int, h: int) -> tuple[int, int]:
    scale = max(1.0, w / FINE_WIDTH)
    return max(8, round(w / scale)), max(8, round(h / scale))


@functools.lru_cache(maxsize=32)
def _plan(h: int, w: int) -> tuple[tuple[int, int], float, tuple[int, ...], tuple[int, ...], bool]:
    """For a frame of h×w: the finest level's size (w, h), frame pixels per its pixel, the two levels'
    shapes (3, h, w) and whether levels() makes both in one call (the sizes halve exactly); worked out once
    per frame size."""
    size = _fine_size(w, h)
    fw, fh = size
    half = (max(8, fh // 2), max(8, fw // 2))
    exact = LEVELS == 2 and half == (fh // 2, fw // 2) and fh % 2 == 0 and fw % 2 == 0
    return size, w / fw, (3, fh, fw), (3, *half), exact


def fine_shape(gray: np.ndarray) -> tuple[int, int]:
    """(h, w) of the finest level of a frame of ``gray``'s size."""
    size = _plan(*gray.shape)[0]
    return size[1], size[0]


def fine_frame(gray: np.ndarray, warp: Callable[[np.ndarray], np.ndarray] | None = None) -> FineFrame:
    """The levels of a grey frame (uint8 or float, any size); ``warp`` remaps the finest level first into a
    float32 image (the compass's equal-angle columns at that size). One compiled call
    (flow_refine_kernels.levels) when the levels halve exactly (64×64, 320×240 frames), else level by
    level."""
    h, w = gray.shape
    size, scale, fine_levels, coarse_levels, exact = _plan(h, w)  # (3, h, w) each: blurred, gx, gy
    image = gray
    if size[0] != w or size[1] != h:
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    if warp is not None:  # it makes the float32 frame (the compass's remap reads uint8 as it is)
        image = warp(image)
    elif image.dtype.char not in "Bf":  # uint8 and float32 go to levels() as they are
        image = image.astype(np.float32)
    if exact and flow_kernels.ready() and image.shape == fine_levels[1:]:
        fine, coarse = np.empty(fine_levels, np.float32), np.empty(coarse_levels, np.float32)
        kernels.levels(np.ascontiguousarray(image), SMOOTH_TAPS, fine, coarse)
        return FineFrame((fine, coarse), scale)
    image = image.astype(np.float32, copy=False)
    levels = [_level(image)]
    for _ in range(LEVELS - 1):
        image = cv2.resize(image, (max(8, image.shape[1] // 2), max(8, image.shape[0] // 2)),
                           interpolation=cv2.INTER_AREA)
        levels.append(_level(image))
    return FineFrame(tuple(levels), scale)


def _lk_level(t: np.ndarray, moving: np.ndarray, ux: float, uy: float, iterations: int
              ) -> tuple[float, float, int]:
    """``flow_refine_kernels.lk`` in OpenCV and NumPy (without numba): the same steps, a warp each."""
    h, w = t.shape[1:]
    for _ in range(iterations):
        ok, y0, y1, x0, x1 = kernels.overlap(h, w, ux, uy, BORDER)
        if not ok:
            return ux, uy, kernels.NO_OVERLAP
        gx = t[1, y0:y1, x0:x1].astype(np.float64).ravel()
        gy = t[2, y0:y1, x0:x1].astype(np.float64).ravel()
        a, b, c = float(gx @ gx), float(gx @ gy), float(gy @ gy)
        det = a * c - b * b
        if not det > MIN_DET * max(a * c, 1e-30):
            return ux, uy, kernels.APERTURE
        error = (_shift(moving[0], ux, uy, (y0, y1, x0, x1)) - t[0, y0:y1, x0:x1]).ravel()
        ex, ey = float(gx @ error), float(gy @ error)
        # inverse compositional: T(y + Δ) ≈ W(y)  ->  Δ = H⁻¹ Σ ∇T (W - T); the motion grows by -Δ
        step_x = (c * ex - b * ey) / det
        step_y = (a * ey - b * ex) / det
        ux, uy = ux - step_x, uy - step_y
        if abs(step_x) < CONVERGED_PX and abs(step_y) < CONVERGED_PX:
            return ux, uy, kernels.CONVERGED
    return ux, uy, kernels.RAN_OUT


def _shift(image: np.ndarray, ux: float, uy: float, box: tuple[int, int, int, int]) -> np.ndarray:
    """``image`` sampled at y + u over the box [y0, y1) × [x0, x1) (bilinear; float32; OpenCV's warp, which
    rounds the sub-pixel shift to 1/32 pixel)."""
    y0, y1, x0, x1 = box
    shift = np.float32([[1, 0, ux + x0], [0, 1, uy + y0]])
    return cv2.warpAffine(image, shift, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_REFLECT)


def refine(first: FineFrame, second: FineFrame, dx: float, dy: float) -> Refined | None:
    """Refine the displacement ``(dx, dy)`` (frame pixels) from ``first`` to ``second``; None when the frames
    do not overlap enough; ``aperture`` set (and ``ncc`` -1) when the normal equations are nearly singular
    (a flat overlap or edges of one orientation: stripes)."""
    scale = first.scale
    ux, uy = dx / scale / 2 ** (LEVELS - 1), dy / scale / 2 ** (LEVELS - 1)  # coarsest level's pixels
    if LEVELS == 2 and flow_kernels.ready():  # both levels and the match in one call
        (fine_t, coarse_t), (fine_m, coarse_m) = first.levels, second.levels
        ux, uy, score, how = kernels.refine_seed(coarse_t, coarse_m, fine_t, fine_m, ux, uy, _COARSE_STEPS,
                                                 _FINE_STEPS, BORDER, MIN_DET, CONVERGED_PX)
        if how > kernels.APERTURE:  # RAN_OUT or CONVERGED
            return Refined(ux * scale, uy * scale, score, how == kernels.CONVERGED)
        return None if how == kernels.NO_OVERLAP else Refined(dx, dy, -1.0, False, aperture=True)
    converged = False
    for index in range(LEVELS - 1, -1, -1):
        if index < LEVELS - 1:
            ux, uy = 2.0 * ux, 2.0 * uy
        ux, uy, how = _lk_level(first.levels[index], second.levels[index], ux, uy,
                                ITERATIONS[LEVELS - 1 - index])
        if how == kernels.NO_OVERLAP:
            return None
        if how == kernels.APERTURE:
            return Refined(dx, dy, -1.0, False, aperture=True)
        converged = how == kernels.CONVERGED
    t, moving = first.levels[0], second.levels[0]
    ok, *box = kernels.overlap(*t.shape[1:], ux, uy, BORDER)
    if not ok:
        return None
    y0, y1, x0, x1 = box
    warped = _shift(moving[0], ux, uy, (y0, y1, x0, x1))
    return Refined(ux * scale, uy * scale, ncc.score(t[0, y0:y1, x0:x1], warped), converged)
