"""The zero-copy Image reader against rosbags' deserializer (an independent CDR implementation): equal fields
for every alignment case, None for every truncation, non-LE encapsulation and (fuzzed) malformed input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from libredgetpu_ros.bags.cdr_image import parse_image

IMAGE = "sensor_msgs/msg/Image"


def _serialize(frame_id: str, encoding: str, height: int, width: int, step: int, sec: int = -5,
               nanosec: int = 999_999_999) -> tuple[bytes, np.ndarray]:
    from libredgetpu_ros.bags.typestore import typestore

    t = typestore().types
    data = np.random.default_rng(len(frame_id) * 31 + width).integers(0, 256, step * height, dtype=np.uint8)
    header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec),
                                      frame_id=frame_id)
    msg = t[IMAGE](header=header, height=height, width=width, encoding=encoding, is_bigendian=1, step=step,
                   data=data)
    return bytes(typestore().serialize_cdr(msg, IMAGE)), data


@pytest.mark.parametrize("frame_id", ["", "c", "cam", "camera_optical_frame", "kamera_ä"])
@pytest.mark.parametrize(("encoding", "width", "step"), [("rgb8", 5, 15), ("mono8", 3, 4), ("bgra8", 2, 8)])
def test_fields_equal_rosbags(frame_id: str, encoding: str, width: int, step: int) -> None:
    from libredgetpu_ros.bags.typestore import typestore

    raw, data = _serialize(frame_id, encoding, 3, width, step)
    ref = typestore().deserialize_cdr(raw, IMAGE)
    view = parse_image(raw)
    assert view is not None
    stamp = ref.header.stamp
    assert (view.sec, view.nanosec, view.frame_id) == (stamp.sec, stamp.nanosec, frame_id)
    assert (view.height, view.width, view.encoding, view.is_bigendian, view.step) == \
        (ref.height, ref.width, ref.encoding, ref.is_bigendian, ref.step)
    np.testing.assert_array_equal(view.data, data)
    assert not view.data.flags.owndata  # a view, not a copy


def test_every_truncation_and_big_endian_are_refused() -> None:
    raw, _ = _serialize("cam", "rgb8", 2, 2, 6)
    assert all(parse_image(raw[:n]) is None for n in range(len(raw)))
    assert parse_image(b"\x00\x00" + raw[2:]) is None  # CDR big-endian: left to rclpy


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=0, max_size=80), st.integers(0, 200))
def test_malformed_input_is_refused_or_parsed_like_rosbags(noise: bytes, at: int) -> None:
    from libredgetpu_ros.bags.typestore import typestore

    raw, _ = _serialize("cam", "rgb8", 2, 2, 6)
    at = min(at, len(raw))
    mutated = raw[:at] + noise + raw[at + len(noise):]
    view = parse_image(mutated)
    if view is None:
        return
    ref = typestore().deserialize_cdr(mutated, IMAGE)  # whatever we accept, rosbags reads the same way
    assert (view.frame_id, view.encoding, view.height, view.width, view.step) == \
        (ref.header.frame_id, ref.encoding, ref.height, ref.width, ref.step)
    np.testing.assert_array_equal(view.data, ref.data)
