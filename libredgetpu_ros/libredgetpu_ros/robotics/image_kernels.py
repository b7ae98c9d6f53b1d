"""Compiled steps of a frame -> template input (robotics/image.py): RGB to BT.601 luma in one pass.

``cv2.cvtColor(COLOR_RGB2GRAY)`` of a small frame costs mostly the call around the arithmetic; this pass
gives the same bytes (OpenCV's 15-bit fixed point, rounded; ``test_flow_exactness.py`` checks all 2^24
colours) for less (bench/results/robotics_frames.md, bench/results/resize.md). Used by ``image.luma`` (every
colour frame for a one-channel template or the flow, through ``image.fit_image`` / ``image.match_channels``)
once :func:`warm_up` compiled it (or loaded it from the cache folder, libredgetpu_ros.jit: a one-channel
template's ``TemplateRunner`` does when it opens a backend, the flow's ``flow_kernels.warm_up`` too); OpenCV
otherwise.
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros import jit


def luma(rgb, out):  # pragma: no cover - compiled
    """``out`` = BT.601 luma of the uint8 RGB image ``rgb`` (h, w, 3), bit for bit as cv2.cvtColor's
    COLOR_RGB2GRAY computes it (15-bit fixed point, rounded); one pass, no OpenCV call around it."""
    src, dst = rgb.reshape(rgb.size), out.reshape(out.size)
    for p in range(np.uint64(dst.size)):
        q = np.uint64(3) * p
        dst[p] = (np.int32(src[q]) * 9798 + np.int32(src[q + np.uint64(1)]) * 19235
                  + np.int32(src[q + np.uint64(2)]) * 3735 + 16384) >> 15


KERNELS = (("luma", {"cache": True, "nogil": True}),)
_warm = False


def warm_up() -> bool:
    """Import numba, compile (or load) :func:`luma` and run it on the frame kinds a node hands over; False
    without numba (OpenCV makes the grey frame)."""
    global _warm
    if _warm:
        return True
    if not jit.compile_kernels(globals(), KERNELS):
        return False
    rgb = np.zeros((8, 8, 3), np.uint8)
    gray = np.zeros((8, 8), np.uint8)
    for colour in (rgb, jit.read_only(rgb)):  # a ROS rgb8 frame is a read-only view of the message
        luma(colour, gray)
    _warm = True
    return True


def ready() -> bool:
    """True once warm_up() compiled the kernel (a check for per-frame code: no import, no compile)."""
    return _warm
