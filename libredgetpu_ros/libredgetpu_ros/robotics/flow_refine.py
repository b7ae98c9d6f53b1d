"""Sub-grid refinement of the global flow at the camera's resolution, seeded by the device's correlation peak.

The Gabor template sees the frame at 64×64 (or 128×128) and correlates on a grid of 4 model pixels: at 320×240
one grid step is 20 × 15 camera pixels, and a motion of a few camera pixels per frame is a fraction of a step
that the peak interpolation reads short (0.76 of the truth at 2 px/frame, fine textures 0.25-0.42). Here the
CPU finishes the job where the pixels still are: a global-translation Lucas-Kanade (Gauss-Newton on the
grey levels, inverse compositional) on the frames at up to ``FINE_WIDTH`` pixels wide, started at the device's
displacement, coarse-to-fine over two levels. The device keeps the search (it finds the basin, ±search_range
grid steps); the refinement only walks the last fraction of a step, so it needs no search of its own.

What is kept per frame (``FineFrame``): the smoothed grey image at each level, its gradients and the
summed-area tables of the gradient products (the Gauss-Newton matrix of any overlap rectangle in O(1)); a
pair then costs one bilinear warp of the newer frame and two dot products per iteration.

The refinement also says how well the pair matches at the refined displacement: ``ncc``, the normalised
cross-correlation of the two frames over their overlap at the finest level. Motion beyond the device's search
range (the device's peak is then on an unrelated displacement) and an aliased peak on a repeating scene end on
a poor match and are reported as such (``robotics.flow`` decides validity).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

FINE_WIDTH = 160  # frames are refined at most this wide (320×240 -> 160×120): 0.05-px steps at 320
LEVELS = 2  # coarse-to-fine levels (each half the previous width)
ITERATIONS = (4, 4)  # Gauss-Newton iterations per level, coarse first
SMOOTH_SIGMA = 1.0  # Gaussian blur before gradients (pixels of each level)
CONVERGED_PX = 0.01  # an update smaller than this (level pixels) ends the level


@dataclass(frozen=True, slots=True)
class _Level:
    image: np.ndarray  # float32 smoothed grey
    gx: np.ndarray  # float32 gradients
    gy: np.ndarray
    tables: np.ndarray  # float64 (3, h+1, w+1): summed-area tables of gx², gx·gy, gy²


@dataclass(frozen=True, slots=True)
class FineFrame:
    """A frame at the refinement's levels (finest first) and the factor from its pixels to the frame's."""

    levels: tuple[_Level, ...]
    scale: float  # frame pixels per finest-level pixel


@dataclass(frozen=True, slots=True)
class Refined:
    """Refined displacement in frame pixels (content of frame t appears at +(dx, dy) in frame t+1), the
    normalised cross-correlation of the overlap there, and whether the last update was below
    ``CONVERGED_PX``."""

    dx: float
    dy: float
    ncc: float
    converged: bool
    aperture: bool = False  # the overlap has gradients of one orientation only: no 2-D motion in it


def _level(gray: np.ndarray) -> _Level:
    image = cv2.GaussianBlur(gray, (0, 0), SMOOTH_SIGMA)
    gx = cv2.Sobel(image, cv2.CV_32F, 1, 0, ksize=3, scale=0.125)
    gy = cv2.Sobel(image, cv2.CV_32F, 0, 1, ksize=3, scale=0.125)
    tables = np.stack([cv2.integral(gx * gx, sdepth=cv2.CV_64F), cv2.integral(gx * gy, sdepth=cv2.CV_64F),
                       cv2.integral(gy * gy, sdepth=cv2.CV_64F)])
    return _Level(image, gx, gy, tables)


def fine_gray(gray: np.ndarray) -> tuple[np.ndarray, float]:
    """A grey frame (uint8 or float, any size) at the finest level's size (float32), and the frame pixels
    per pixel of it."""
    h, w = gray.shape
    scale = max(1.0, w / FINE_WIDTH)
    size = (max(8, round(w / scale)), max(8, round(h / scale)))
    image = gray
    if size != (w, h):  # uint8 in: resized as such (faster), made float after
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    return image.astype(np.float32), w / size[0]


def fine_frame(gray: np.ndarray, warp: Callable[[np.ndarray], np.ndarray] | None = None) -> FineFrame:
    """The levels of a grey frame (uint8 or float, any size); ``warp`` remaps the finest level first (the
    compass's equal-angle columns at that size)."""
    image, scale = fine_gray(gray)
    if warp is not None:
        image = warp(image)
    levels = [_level(image)]
    for _ in range(LEVELS - 1):
        image = cv2.resize(image, (max(8, image.shape[1] // 2), max(8, image.shape[0] // 2)),
                           interpolation=cv2.INTER_AREA)
        levels.append(_level(image))
    return FineFrame(tuple(levels), scale)


def _overlap(shape: tuple[int, int], dx: float, dy: float, border: int) -> tuple[int, int, int, int] | None:
    """Rectangle [y0, y1) × [x0, x1) of frame t whose points y land inside frame t+1 at y + d, less border."""
    h, w = shape
    x0 = max(border, math.ceil(-dx) + border)
    x1 = min(w - border, math.floor(w - 1 - dx) - border)
    y0 = max(border, math.ceil(-dy) + border)
    y1 = min(h - border, math.floor(h - 1 - dy) - border)
    if x1 - x0 < 8 or y1 - y0 < 8:
        return None
    return y0, y1, x0, x1


def _box(table: np.ndarray, box: tuple[int, int, int, int]) -> float:
    y0, y1, x0, x1 = box
    return float(table[y1, x1] - table[y0, x1] - table[y1, x0] + table[y0, x0])


def refine(first: FineFrame, second: FineFrame, dx: float, dy: float) -> Refined | None:
    """Refine the displacement ``(dx, dy)`` (frame pixels) from ``first`` to ``second``; None when the frames
    do not overlap enough; ``aperture`` set (and ``ncc`` -1) when the normal equations are nearly singular
    (a flat overlap or edges of one orientation: stripes)."""
    scale = first.scale
    ux, uy = dx / scale / 2 ** (LEVELS - 1), dy / scale / 2 ** (LEVELS - 1)  # coarsest level's pixels
    converged = False
    box = None
    for index in range(LEVELS - 1, -1, -1):
        t, moving = first.levels[index], second.levels[index]
        if index < LEVELS - 1:
            ux, uy = 2.0 * ux, 2.0 * uy
        converged = False
        for _ in range(ITERATIONS[LEVELS - 1 - index]):
            box = _overlap(t.image.shape, ux, uy, 2)
            if box is None:
                return None
            y0, y1, x0, x1 = box
            a, b, c = (_box(t.tables[k], box) for k in range(3))
            det = a * c - b * b
            if not det > 0.05 * max(a * c, 1e-30):  # smallest / largest eigenvalue below ~1/20
                return Refined(dx, dy, -1.0, False, aperture=True)
            # second sampled at y + u over the box: W(y) = I1(y + u) ≈ T(y) when u is right
            shift = np.float32([[1, 0, ux + x0], [0, 1, uy + y0]])
            warped = cv2.warpAffine(moving.image, shift, (x1 - x0, y1 - y0),
                                    flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                                    borderMode=cv2.BORDER_REFLECT)
            error = warped - t.image[y0:y1, x0:x1]
            ex = float(np.vdot(t.gx[y0:y1, x0:x1], error))
            ey = float(np.vdot(t.gy[y0:y1, x0:x1], error))
            # inverse compositional: T(y + Δ) ≈ W(y)  ->  Δ = H⁻¹ Σ ∇T (W - T); the motion grows by -Δ
            step_x = (c * ex - b * ey) / det
            step_y = (a * ey - b * ex) / det
            ux, uy = ux - step_x, uy - step_y
            if abs(step_x) < CONVERGED_PX and abs(step_y) < CONVERGED_PX:
                converged = True
                break
    t, moving = first.levels[0], second.levels[0]
    box = _overlap(t.image.shape, ux, uy, 2)
    if box is None:
        return None
    y0, y1, x0, x1 = box
    shift = np.float32([[1, 0, ux + x0], [0, 1, uy + y0]])
    warped = cv2.warpAffine(moving.image, shift, (x1 - x0, y1 - y0),
                            flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP, borderMode=cv2.BORDER_REFLECT)
    ncc = _ncc(t.image[y0:y1, x0:x1], warped)
    return Refined(ux * scale, uy * scale, ncc, converged)


def _ncc(a: np.ndarray, b: np.ndarray) -> float:
    """Normalised cross-correlation of two same-size images (zero-mean; 0 for a flat one)."""
    a = np.ascontiguousarray(a, dtype=np.float32).ravel()
    b = np.ascontiguousarray(b, dtype=np.float32).ravel()
    n = a.size
    sa, sb = float(a.sum(dtype=np.float64)), float(b.sum(dtype=np.float64))
    var_a = float(np.dot(a, a)) - sa * sa / n
    var_b = float(np.dot(b, b)) - sb * sb / n
    if var_a <= 1e-6 * n or var_b <= 1e-6 * n:
        return 0.0
    return (float(np.dot(a, b)) - sa * sb / n) / math.sqrt(var_a * var_b)
