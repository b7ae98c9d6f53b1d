"""CI fuzzing of the compressed camera frame path (``image_msgs.compressed_to_rgb``: Pillow's PNG/JPEG header
readers, the pixel budget, then OpenCV's decoder): 1,500 seeded mutations of small real PNG and JPEG frames
and of a (small) deflate-bomb PNG, mutating the headers most often; each case limited to 2 s and 1 GiB of
address space. Every input must decode or be refused as ``BadImage`` (bad input, counted by the node)."""

from __future__ import annotations

import cv2
import numpy as np
from libredgetpu_ros.ros.image_msgs import BadImage, compressed_to_rgb
from sensor_msgs.msg import CompressedImage

from ..ros._crafted_images import png_bomb
from .harness import FuzzTarget, check_budget

CASES = 1500


def _decode(data: bytes) -> object:
    return compressed_to_rgb(CompressedImage(format="png", data=data))


def _seeds() -> list[bytes]:
    rgb = np.random.default_rng(11).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    gradient = np.broadcast_to(np.arange(64, dtype=np.uint8)[None, :, None] * 4, (48, 64, 3))
    progressive = cv2.imencode(".jpg", np.ascontiguousarray(gradient), [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])[1]
    return [cv2.imencode(".png", rgb)[1].tobytes(), cv2.imencode(".jpg", rgb)[1].tobytes(),
            progressive.tobytes(), png_bomb(300, 200)]


def compressed_frame_target() -> FuzzTarget:
    """The target (bench/bench_fuzz_budget.py runs its long run)."""
    return FuzzTarget(name="compressed_frame", seeds=_seeds(), run=_decode, allowed=(BadImage,),
                      hot=lambda seed: [(0, 700)])


def test_compressed_frame_fuzz_budget() -> None:
    target = compressed_frame_target()
    check_budget(target, CASES, time_limit_s=2.0, memory_limit_mb=1024, min_refused=CASES // 10,
                 min_accepted=CASES // 20)
