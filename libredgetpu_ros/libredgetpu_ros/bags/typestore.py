"""A rosbags typestore that knows ROS 2 Kilted's messages, vision_msgs and ours (libredgetpu_ros_interfaces).

rosbags ships Kilted's core messages but not vision_msgs, so both packages' definitions are read from their
``.msg`` files, and bags written with this typestore carry the message definitions that ``rosbags`` and
``ros2 bag`` need to decode them. The installed copy (the one the live rclpy classes were generated from)
wins; our own package also has its source tree as a fallback.
"""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path
from typing import Any

from libredgetpu_ros.errors import ConfigError

INTERFACES_PACKAGE = "libredgetpu_ros_interfaces"
# Registered in this order (ours may refer to vision_msgs, never the other way round).
MSG_PACKAGES = ("vision_msgs", INTERFACES_PACKAGE)


def msg_dirs(package: str = INTERFACES_PACKAGE) -> list[Path]:
    """Where ``package``'s ``.msg`` files may be, in order of preference."""
    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    prefixes.append(Path(sys.prefix))
    candidates = [prefix / "share" / package / "msg" for prefix in prefixes]
    if package == INTERFACES_PACKAGE:
        candidates.append(Path(__file__).resolve().parents[3] / INTERFACES_PACKAGE / "msg")  # source tree
    return candidates


def find_msg_dir(package: str = INTERFACES_PACKAGE) -> Path:
    for candidate in msg_dirs(package):
        if any(candidate.glob("*.msg")):
            return candidate
    looked = ", ".join(str(c) for c in msg_dirs(package))
    raise ConfigError(f"cannot find the {package} .msg files (looked in {looked})")


@cache
def typestore() -> Any:
    """The Kilted typestore with vision_msgs and our interfaces registered (built once per process)."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_KILTED)
    for package in MSG_PACKAGES:
        types: dict[str, Any] = {}
        for path in sorted(find_msg_dir(package).glob("*.msg")):
            types.update(get_types_from_msg(path.read_text(), f"{package}/msg/{path.stem}"))
        store.register(types)
    return store
