"""Compiled remap of the compass's equal-angle columns (robotics/compass.py), numba.

The pinhole projection remaps every frame twice: the model's uint8 input and the refinement's float32 frame.
cv2.remap with float maps costs ~14 µs per 64×64 frame (it works the interpolation out per pixel on every
call); here the source pixels and weights of each output pixel are worked out once per frame size
(:func:`plan`) and a frame is one pass of four loads and three multiply-adds per pixel. The numbers are
OpenCV's (5.x: the bilinear interpolation at the map's exact coordinates, BORDER_REPLICATE, uint8 rounded):
float32 within 1e-4 grey level, uint8 equal but for a rounding of an exact half
(``test_compass.py::test_compiled_remap_equals_opencv``).

Without numba the compass keeps cv2.remap.
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros import jit


def plan(map_x: np.ndarray, map_y: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices (n, 4) uint64: the flat source pixels up-left, up-right, down-left, down-right of each output
    pixel, clamped to the frame as BORDER_REPLICATE does; fractions (n, 2) float32: x and y past the up-left
    one) for cv2.remap's float maps over a ``width``×``height`` source."""
    x, y = map_x.astype(np.float64).ravel(), map_y.astype(np.float64).ravel()
    x0, y0 = np.floor(x), np.floor(y)
    fractions = np.stack([x - x0, y - y0], axis=1).astype(np.float32)
    x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
    cols = [np.clip(x0, 0, width - 1), np.clip(x0 + 1, 0, width - 1)]
    rows = [np.clip(y0, 0, height - 1), np.clip(y0 + 1, 0, height - 1)]
    indices = np.stack([rows[0] * width + cols[0], rows[0] * width + cols[1], rows[1] * width + cols[0],
                        rows[1] * width + cols[1]], axis=1)
    return indices.astype(np.uint64), fractions


def remap(src, indices, fractions, rounded, exact):  # pragma: no cover - compiled
    """``src`` (uint8 or float32, any shape with the plan's size) sampled bilinearly per the plan into
    ``exact`` (float32) and/or ``rounded`` (uint8: rounded half to even, clipped: OpenCV's uint8 remap);
    an empty array is not written. The model's input and the refinement's frame of one frame in one pass."""
    flat = src.reshape(src.size)
    at, part = indices.reshape(indices.size), fractions.reshape(fractions.size)
    to_int, to_float = rounded.reshape(rounded.size), exact.reshape(exact.size)
    one, four, two = np.float32(1.0), np.uint64(4), np.uint64(2)
    for p in range(np.uint64(fractions.shape[0])):  # unsigned: no negative-index check per access
        i, f = p * four, p * two
        fx, fy = part[f], part[f + np.uint64(1)]
        a, b = np.float32(flat[at[i]]), np.float32(flat[at[i + np.uint64(1)]])
        c, d = np.float32(flat[at[i + np.uint64(2)]]), np.float32(flat[at[i + np.uint64(3)]])
        value = (one - fy) * ((one - fx) * a + fx * b) + fy * ((one - fx) * c + fx * d)
        if to_int.size:
            to_int[p] = min(max(np.rint(value), np.float32(0.0)), np.float32(255.0))
        if to_float.size:
            to_float[p] = value


KERNELS = (("remap", {"cache": True, "nogil": True}),)
_warm = False


def warm_up() -> bool:
    """Compile (or load) the remap for what the compass's frames bring: uint8 frames (writable, and
    read-only: a mono8 message at the model's size) to uint8, float32 and uint8 to float32; False without
    numba (cv2.remap then)."""
    global _warm
    if _warm:
        return True
    if not jit.compile_kernels(globals(), KERNELS):
        return False
    indices, fractions = plan(*np.meshgrid(np.arange(8, dtype=np.float32), np.arange(8, dtype=np.float32)),
                              8, 8)
    frame = np.zeros((8, 8), np.uint8)
    for src in (frame, jit.read_only(frame), frame.astype(np.float32)):
        remap(src, indices, fractions, np.empty((8, 8), np.uint8), np.empty((8, 8), np.float32))
    _warm = True
    return True

