"""What the Fast DDS profile in effect allows: the shared-memory segment size (no rclpy import).

Frames larger than the SHM segment cannot go through shared memory; Fast DDS then sends them as fragmented
UDP, where bursts of large frames are lost (measured: 4000x3000 rgb8 = 36 MB frames with the 16 MiB default
segment, docs/perception_node.md "Large frames"). The node names the segment in its warning.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET

from libredgetpu_ros.errors import InputError
from libredgetpu_ros.paths import read_regular

PROFILE_VAR = "FASTDDS_DEFAULT_PROFILES_FILE"
# Fast DDS's own SHM segment size when a profile does not set one.
FASTDDS_DEFAULT_SEGMENT = 512 * 1024
MAX_PROFILE_BYTES = 4 * 1024 * 1024


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def shm_segment_bytes(profile: str | os.PathLike[str] | None = None) -> int | None:
    """The largest ``segment_size`` of the SHM transports the profile declares (``profile`` default: the file
    ``FASTDDS_DEFAULT_PROFILES_FILE`` names); Fast DDS's default without a setting; None when no profile is
    set or it cannot be read (the caller then says less, nothing fails)."""
    path = profile if profile is not None else os.environ.get(PROFILE_VAR)
    if not path:
        return None
    try:
        # A regular file only, opened without blocking: a FIFO named by the variable hung every reader.
        root = ET.fromstring(read_regular(path, "Fast DDS profile", MAX_PROFILE_BYTES))
    except (InputError, ET.ParseError):
        return None
    sizes = []
    for descriptor in root.iter():
        if _local(descriptor.tag) != "transport_descriptor":
            continue
        fields = {_local(child.tag): (child.text or "").strip() for child in descriptor}
        if fields.get("type") != "SHM":
            continue
        try:
            sizes.append(int(fields.get("segment_size") or FASTDDS_DEFAULT_SEGMENT))
        except ValueError:
            return None
    return max(sizes) if sizes else None
