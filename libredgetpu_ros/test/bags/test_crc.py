"""The bag code's CRC-32 is ISA-L's (pinned) and gives zlib's values (the format's checksum)."""

from __future__ import annotations

import zlib

import numpy as np
from libredgetpu_ros.bags.crc import crc32


def test_isal_is_used() -> None:
    # requirements.lock.txt pins isal; without it every CRC'd frame costs zlib's table-driven pass.
    assert crc32.__module__.startswith("isal"), crc32.__module__


def test_same_values_as_zlib() -> None:
    rng = np.random.default_rng(0)
    for size in (0, 1, 7, 64, 4095, 921_654):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        view = memoryview(bytearray(b"xx" + data + b"yy"))[2:-2]  # a slice of a larger buffer, as a chunk is
        assert crc32(data) == crc32(view) == zlib.crc32(data), size
