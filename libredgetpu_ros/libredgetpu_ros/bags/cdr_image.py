"""Zero-copy view of a little-endian CDR ``sensor_msgs/msg/Image``.

rclpy's deserializer copies the pixel payload into an ``array.array`` (~2 ms per 640x480 frame, holding the
GIL, so it cannot overlap inference). This reads the few header fields with ``struct`` and views the pixels
in place. It accepts only complete, well-formed little-endian messages (no trailing bytes) and returns None
otherwise, so the caller falls back to rclpy, which stays the reference for anything unusual (and reports
the error).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

_CDR_LE = b"\x00\x01"
_U32 = struct.Struct("<I")
_STAMP = struct.Struct("<iI")
_ORIGIN = 4  # CDR alignment counts from the end of the encapsulation header


@dataclass(frozen=True, slots=True)
class ImageView:
    """The fields of ``sensor_msgs/msg/Image``; ``data`` is a read-only view into the serialized bytes."""

    sec: int
    nanosec: int
    frame_id: str
    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int
    data: np.ndarray


class _Truncated(Exception):
    pass


def _align4(pos: int) -> int:
    return pos + (-(pos - _ORIGIN) % 4)


def _u32(buf: memoryview, pos: int) -> tuple[int, int]:
    pos = _align4(pos)
    if pos + 4 > len(buf):
        raise _Truncated
    return _U32.unpack_from(buf, pos)[0], pos + 4


def _string(buf: memoryview, pos: int) -> tuple[str, int]:
    size, pos = _u32(buf, pos)
    if size == 0 or pos + size > len(buf) or buf[pos + size - 1] != 0:
        raise _Truncated
    return bytes(buf[pos:pos + size - 1]).decode("utf-8"), pos + size


def parse_image(raw: bytes | memoryview) -> ImageView | None:
    """The Image in ``raw``, or None when it is not a complete little-endian CDR Image (see module doc)."""
    buf = memoryview(raw)
    if len(buf) < _ORIGIN + 8 or bytes(buf[:2]) != _CDR_LE:
        return None
    try:
        sec, nanosec = _STAMP.unpack_from(buf, _ORIGIN)
        frame_id, pos = _string(buf, _ORIGIN + 8)
        height, pos = _u32(buf, pos)
        width, pos = _u32(buf, pos)
        encoding, pos = _string(buf, pos)
        if pos + 1 > len(buf):
            raise _Truncated
        is_bigendian, pos = buf[pos], pos + 1
        step, pos = _u32(buf, pos)
        size, pos = _u32(buf, pos)
        if not 0 <= len(buf) - (pos + size) <= 3:  # truncated, or trailing bytes beyond CDR end padding
            raise _Truncated
    except (_Truncated, UnicodeDecodeError):
        return None
    data = np.frombuffer(buf, dtype=np.uint8, count=size, offset=pos)
    return ImageView(sec, nanosec, frame_id, height, width, encoding, is_bigendian, step, data)
