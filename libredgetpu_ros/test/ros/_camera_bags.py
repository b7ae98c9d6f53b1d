"""Camera bags for the process-bag tests (test_bag_process.py, test_bag_process_pipelined.py), written with
rosbags directly so that a test controls every byte (truncated CDR, unsupported encodings, foreign types):
frames serialized as CDR with a ``cam`` header stamped at the bag time, connections made on first use (or
in the order a test asks for), the classify config those tests run, and an output bag's messages decoded
for comparison."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .._helpers import load_helper

compare = load_helper(Path(__file__).resolve().parent / "_bag_compare.py")

CLASSIFY = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
RAW, COMPRESSED = "/image_raw", "/image_raw/compressed"
IMAGE, COMPRESSED_IMAGE = "sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"
RIHS_UNKNOWN = "RIHS01_" + "ab" * 32  # the type hash of a type the typestore does not know


def classify_config(tmp: Path, fixture_path: Any, name: str = "classify.yaml", **extra: Any) -> Path:
    """A ROS parameters file of the perception node classifying with MobileNet on the CPU (``extra``
    overrides)."""
    import yaml

    params = {"model": str(fixture_path(CLASSIFY)), "backend": "cpu", "task": "classify", "top_k": 3,
              "max_results": 3, "score_threshold": 0.0, **extra}
    path = tmp / name
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    return path


def header(store: Any, ns: int) -> Any:
    t = store.types
    stamp = t["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)
    return t["std_msgs/msg/Header"](stamp=stamp, frame_id="cam")


def image_cdr(store: Any, rgb: np.ndarray, ns: int, encoding: str = "rgb8") -> bytes:
    """A sensor_msgs/Image of ``rgb`` (HxWx3 uint8, labelled ``encoding``) stamped ``ns``."""
    height, width = rgb.shape[:2]
    msg = store.types[IMAGE](header=header(store, ns), height=height, width=width, encoding=encoding,
                             is_bigendian=0, step=width * 3, data=rgb.reshape(-1))
    return bytes(store.serialize_cdr(msg, IMAGE))


def compressed_cdr(store: Any, data: bytes, ns: int, fmt: str = "jpeg") -> bytes:
    """A sensor_msgs/CompressedImage holding ``data`` (``fmt``) stamped ``ns``."""
    msg = store.types[COMPRESSED_IMAGE](header=header(store, ns), format=fmt,
                                        data=np.frombuffer(data, np.uint8))
    return bytes(store.serialize_cdr(msg, COMPRESSED_IMAGE))


class CameraBag:
    """An open bag being written (:func:`open_camera_bag`); ``store``: the typestore the frames are made
    with."""

    def __init__(self, writer: Any, store: Any) -> None:
        self.writer, self.store = writer, store
        self._connections: dict[tuple[str, str], Any] = {}  # (topic, type): a topic may carry two types

    def connection(self, topic: str, msgtype: str = IMAGE, **kwargs: Any) -> Any:
        """``topic``'s connection of ``msgtype``, made on first use (``kwargs``: rosbags' ``msgdef``,
        ``rihs01``... for a type the typestore does not know)."""
        conn = self._connections.get((topic, msgtype))
        if conn is None:
            if "msgdef" not in kwargs:
                kwargs["typestore"] = self.store
            conn = self._connections[topic, msgtype] = self.writer.add_connection(topic, msgtype, **kwargs)
        return conn

    def write(self, topic: str, ns: int, data: bytes, msgtype: str = IMAGE, **kwargs: Any) -> None:
        """Any bytes as a message of ``topic`` at bag time ``ns`` (damaged frames, foreign types)."""
        self.writer.write(self.connection(topic, msgtype, **kwargs), ns, data)

    def image(self, ns: int, rgb: np.ndarray, encoding: str = "rgb8", topic: str = RAW) -> None:
        self.write(topic, ns, image_cdr(self.store, np.ascontiguousarray(rgb), ns, encoding))

    def compressed(self, ns: int, data: bytes, fmt: str = "jpeg", topic: str = COMPRESSED) -> None:
        self.write(topic, ns, compressed_cdr(self.store, data, ns, fmt), COMPRESSED_IMAGE)


@contextmanager
def open_camera_bag(path: Path, storage: str = "mcap") -> Iterator[CameraBag]:
    """A new bag at ``path`` (``storage``: mcap or sqlite3), closed on exit."""
    from libredgetpu_ros.bags.storage import open_writer
    from libredgetpu_ros.bags.typestore import typestore

    writer = open_writer(path, storage)
    try:
        yield CameraBag(writer, typestore())
    finally:
        writer.close()


def decoded(bag: Path) -> list[tuple[str, str, int, Any]]:
    """Every message of a bag as (topic, type, bag time, plain Python): decoded, not raw, as rclpy leaves
    CDR alignment padding unzeroed (it differs run to run)."""
    from rosbags.highlevel import AnyReader

    with AnyReader([bag]) as reader:
        return [(c.topic, c.msgtype, ts, compare.plain(reader.deserialize(raw, c.msgtype)))
                for c, ts, raw in reader.messages()]
