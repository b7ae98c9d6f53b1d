"""Field-by-field comparison of messages from rclpy (live) and rosbags (offline bag), used by the bag tests.

Both sides are turned into plain Python (dicts, lists, ints, floats, strings) by field name, so the check
does not depend on either library's message classes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

FLOAT_TOL = 1e-6


def plain(msg: Any) -> Any:
    if hasattr(msg, "get_fields_and_field_types"):  # rclpy message
        return {name: plain(getattr(msg, name)) for name in msg.get_fields_and_field_types()}
    if dataclasses.is_dataclass(msg):  # rosbags message
        # Constants (upper-case names, e.g. Marker.ADD) are class fields in rosbags, not message fields.
        fields = [f.name for f in dataclasses.fields(msg) if f.name != "__msgtype__" and not f.name.isupper()]
        return {name: plain(getattr(msg, name)) for name in fields}
    if isinstance(msg, bytes | bytearray | memoryview):
        return np.frombuffer(bytes(msg), np.uint8).tolist()
    if isinstance(msg, np.ndarray):
        return msg.tolist()
    if isinstance(msg, list | tuple) or type(msg).__name__ == "array":
        return [plain(v) for v in msg]
    if isinstance(msg, np.generic):
        return msg.item()
    return msg


def assert_same_message(a: Any, b: Any, where: str) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: fields {a.keys()} != {b!r}"
        for key in a:
            assert_same_message(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{where}: length {len(a)} != {b!r}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_message(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=FLOAT_TOL), f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def stamp_key(msg: Any) -> tuple[int, int]:
    """(sec, nanosec) of a result message: its header, or the first marker's (MarkerArray has none)."""
    header = msg.header if hasattr(msg, "header") else msg.markers[0].header
    return int(header.stamp.sec), int(header.stamp.nanosec)
