"""A rosbags typestore that knows ROS 2 Kilted's messages and ours (libredgetpu_ros_interfaces).

Our definitions are read from the package's ``.msg`` files, so bags written with this typestore carry the
message definitions that ``rosbags`` and ``ros2 bag`` need to decode them. The installed copy (the one the
live rclpy classes were generated from) wins over the source tree.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

from libredgetpu_ros.errors import ConfigError

INTERFACES_PACKAGE = "libredgetpu_ros_interfaces"


def msg_dirs() -> list[Path]:
    """Where the interface ``.msg`` files may be, in order of preference."""
    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    prefixes.append(Path(sys.prefix))
    candidates = [prefix / "share" / INTERFACES_PACKAGE / "msg" for prefix in prefixes]
    candidates.append(Path(__file__).resolve().parents[3] / INTERFACES_PACKAGE / "msg")  # source tree
    return candidates


def find_msg_dir() -> Path:
    for candidate in msg_dirs():
        if any(candidate.glob("*.msg")):
            return candidate
    looked = ", ".join(str(c) for c in msg_dirs())
    raise ConfigError(f"cannot find the {INTERFACES_PACKAGE} .msg files (looked in {looked})")


@cache
def typestore() -> Any:
    """The Kilted typestore with our interfaces registered (built once per process)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_KILTED)
    types: dict[str, Any] = {}
    for path in sorted(find_msg_dir().glob("*.msg")):
        types.update(get_types_from_msg(path.read_text(), f"{INTERFACES_PACKAGE}/msg/{path.stem}"))
    store.register(types)
    return store
