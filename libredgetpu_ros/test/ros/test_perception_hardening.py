"""The perception node across processes under hostile or oversized input (issue 18 items 4 and 5).

- A compressed camera sends the crafted 30000 x 30000 PNG (2.6 MB; before the fix the node decoded it for
  ~16 s at 5.3 GB RSS): it must be refused from its header as bad input (``bad_input_too_large``, WARN, no
  processing error), and the next good frame processed at once.
- A raw camera sends bursts of 4000 x 3000 rgb8 frames (36 MB, over the profile's 16 MiB shared-memory
  segment, so they travel as fragmented UDP and some are lost): the node must count the DDS-reported loss in
  diagnostics and log the warning exactly once, naming the segment.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from ._crafted_images import png_bomb
from ._perception_probe import Probe, bringup_classifier

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

def test_png_bomb_is_refused_as_bad_input_before_decoding(ros_env, fixture_path) -> None:
    import cv2
    from libredgetpu_ros.ros import diagnostics
    from sensor_msgs.msg import CompressedImage

    proc = bringup_classifier(ros_env, fixture_path, "compressed", "image_raw/compressed")
    probe = Probe(ros_env, proc, CompressedImage, "/cam/image_raw/compressed")
    bomb = CompressedImage(format="png", data=png_bomb(30000, 30000))
    bomb.header.stamp.sec = 1
    sent = time.monotonic()
    probe.spin_until(lambda: int(probe.diag.get("bad_input_too_large", 0)) >= 1, 20.0,
                     "the bomb counted as too_large", every=lambda: probe.camera.publish(bomb))
    refused_after = time.monotonic() - sent
    assert probe.diag["errors"] == "0" and probe.level == diagnostics.WARN
    assert not probe.results

    # The next good frame is processed straight away: the node is not stuck decoding.
    _ok, jpeg = cv2.imencode(".jpg", np.full((480, 640, 3), 128, np.uint8))
    good = CompressedImage(format="jpeg", data=jpeg.tobytes())
    good.header.stamp.sec = 2
    started = time.monotonic()
    probe.spin_until(lambda: any(r.header.stamp.sec == 2 for r in probe.results), 10.0, "a result",
                     every=lambda: probe.camera.publish(good))
    assert time.monotonic() - started < 5.0 and refused_after < 10.0
    log = probe.log()
    assert "bad input frame (too_large" in log and "30000x30000" in log
    assert "processing failed" not in log and "[ERROR]" not in log
    probe.stop()


def test_frames_lost_in_transport_are_counted_and_warned_once(ros_env, fixture_path) -> None:
    from sensor_msgs.msg import Image

    proc = bringup_classifier(ros_env, fixture_path, "raw", "image_raw")
    probe = Probe(ros_env, proc, Image, "/cam/image_raw")
    big = bytes(4000 * 3000 * 3)  # 36 MB: over the 16 MiB segment
    stamp = [0]

    def frame(width: int, height: int, data: bytes) -> Image:
        stamp[0] += 1
        msg = Image(width=width, height=height, encoding="rgb8", step=3 * width, data=data)
        msg.header.stamp.sec = stamp[0]
        return msg

    def burst() -> None:  # back to back, then a small frame whose sequence number reveals the gap
        for _ in range(4):
            probe.camera.publish(frame(4000, 3000, big))
        probe.camera.publish(frame(64, 48, bytes(64 * 48 * 3)))

    warning = "camera frames are being lost before they reach this node"
    probe.spin_until(lambda: warning in probe.log(), 60.0, "the transport-loss warning", every=burst)
    for _ in range(3):  # more loss: counted, not warned again
        burst()
        probe.executor.spin_once(timeout_sec=0.5)
    probe.spin_until(lambda: int(probe.diag.get("frames_lost_transport", 0)) >= 1, 10.0,
                     "frames_lost_transport in diagnostics")
    log = probe.log()
    assert log.count(warning) == 1
    assert "larger than the 16.0 MiB shared-memory segment" in log and "Large frames" in log
    probe.stop()
