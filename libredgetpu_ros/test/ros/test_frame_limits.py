"""Frames the node must refuse or report without decoding them (issue 18 items 4 and 5), in process.

- Pixel budget: a compressed frame's size is read from its header (PNG IHDR, JPEG SOF) and a frame over the
  budget is refused as bad input ``too_large`` before any decoding; the crafted 30000 x 30000 PNG of the issue
  (2.6 MB; decoding it took 20 s and 5.3 GB) is refused in milliseconds. Raw frames obey the same budget.
- Transport loss: the DDS profile's shared-memory segment is read from the profile; rmw's message-lost events
  are counted, a bogus one (seen from rmw_fastrtps) ignored, and the warning is given once.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
from libredgetpu_ros.ros.camera.intake import Intake
from libredgetpu_ros.ros.dds_profile import FASTDDS_DEFAULT_SEGMENT, shm_segment_bytes
from libredgetpu_ros.ros.environment import DDS_PROFILE
from libredgetpu_ros.ros.image_msgs import (
    DEFAULT_MAX_PIXELS,
    BadImage,
    compressed_size,
    compressed_to_rgb,
    image_to_rgb,
    to_rgb,
)
from sensor_msgs.msg import CompressedImage, Image

from ._crafted_images import png_bomb

RGB = np.random.default_rng(5).integers(0, 256, size=(48, 64, 3), dtype=np.uint8)


def _encoded(ext: str, rgb: np.ndarray = RGB) -> bytes:
    ok, data = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return data.tobytes()


def test_the_30000_squared_png_bomb_is_refused_from_its_header() -> None:
    bomb = png_bomb(30000, 30000)
    assert len(bomb) < 3_000_000
    msg = CompressedImage(format="png", data=bomb)
    started = time.perf_counter()
    with pytest.raises(BadImage, match="30000x30000 = 900000000 pixels, over the budget of 16777216") as info:
        to_rgb(msg)
    assert info.value.cause == "too_large"
    assert time.perf_counter() - started < 1.0  # header only: the decoder would take ~20 s and 2.7 GB


@pytest.mark.parametrize("ext", [".png", ".jpg"])
def test_header_size_and_the_budget_boundary(ext: str) -> None:
    data = _encoded(ext)
    assert compressed_size(data) == (64, 48)
    msg = CompressedImage(format=ext.strip("."), data=data)
    assert compressed_to_rgb(msg, max_pixels=64 * 48).shape == (48, 64, 3)  # exactly the budget: decoded
    with pytest.raises(BadImage, match="64x48 = 3072 pixels") as info:
        compressed_to_rgb(msg, max_pixels=64 * 48 - 1)
    assert info.value.cause == "too_large"


def test_raw_frames_obey_the_same_budget() -> None:
    msg = Image(height=48, width=64, encoding="rgb8", step=192, data=RGB.tobytes())
    assert image_to_rgb(msg, max_pixels=3072).shape == (48, 64, 3)
    with pytest.raises(BadImage) as info:
        to_rgb(msg, max_pixels=3071)
    assert info.value.cause == "too_large"
    assert DEFAULT_MAX_PIXELS == 4096 * 4096


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n", _encoded(".png")[:20],
                                  b"\xff\xd8\xff\xe0" + bytes(8), b"\xff\xd8 not really a jpeg"])
def test_unreadable_headers_are_bad_input(data: bytes) -> None:
    with pytest.raises(BadImage) as info:
        compressed_to_rgb(CompressedImage(format="jpeg", data=data))
    assert info.value.cause == "decode"


@pytest.mark.parametrize("ext", [".bmp", ".tiff", ".webp"])
def test_only_png_and_jpeg_reach_a_decoder(ext: str) -> None:
    with pytest.raises(BadImage, match="neither PNG nor JPEG") as info:
        compressed_to_rgb(CompressedImage(format=ext.strip("."), data=_encoded(ext)))
    assert info.value.cause == "format"


def test_png_chunk_claiming_more_than_the_frame_is_refused_before_opencv() -> None:
    """Found by fuzzing: OpenCV allocates a PNG chunk's claimed length before reading it; a 549-byte frame
    whose IDAT claims 2 GiB took 5.6 s and 2.1 GB of RSS to be rejected by it."""
    data = bytearray(_encoded(".png"))
    assert data[37:41] == b"IDAT"
    data[33:37] = (0x7FFFFFF0).to_bytes(4, "big")
    started = time.perf_counter()
    with pytest.raises(BadImage, match="chunk b'IDAT' at byte 33 claims 2147483632 bytes") as info:
        compressed_to_rgb(CompressedImage(format="png", data=bytes(data)))
    assert info.value.cause == "decode" and time.perf_counter() - started < 0.5


def test_the_profile_segment_size_is_read(tmp_path: Path) -> None:
    assert shm_segment_bytes(DDS_PROFILE) == 16 * 1024 * 1024
    shm_only = tmp_path / "p.xml"
    shm_only.write_text('<dds xmlns="http://www.eprosima.com"><profiles><transport_descriptors>'
                        '<transport_descriptor><transport_id>s</transport_id><type>SHM</type>'
                        '</transport_descriptor></transport_descriptors></profiles></dds>')
    assert shm_segment_bytes(shm_only) == FASTDDS_DEFAULT_SEGMENT
    (tmp_path / "bad.xml").write_text("<dds")
    assert shm_segment_bytes(tmp_path / "bad.xml") is None
    assert shm_segment_bytes(tmp_path / "missing.xml") is None


def test_transport_loss_is_counted_and_warned_once(monkeypatch) -> None:
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", str(DDS_PROFILE))
    warnings: list[str] = []
    intake = Intake(warnings.append)
    big = SimpleNamespace(data=b"\0" * (20 * 1024 * 1024))
    intake.arrived(big, {})
    event = SimpleNamespace
    intake.on_message_lost(event(total_count=18446744071562067968, total_count_change=2147483647))  # bogus
    assert (intake.stats.lost_transport, warnings) == (0, [])
    intake.on_message_lost(event(total_count=1, total_count_change=1))
    intake.on_message_lost(event(total_count=3, total_count_change=2))
    assert intake.stats.lost_transport == 3
    assert len(warnings) == 1
    assert "20.0 MiB" in warnings[0] and "larger than the 16.0 MiB shared-memory segment" in warnings[0]
    assert "Large frames" in warnings[0]
    intake.reset(stats=True)  # a new configure warns again
    intake.on_message_lost(event(total_count=4, total_count_change=1))
    assert len(warnings) == 2 and "(1 so far" in warnings[1]
