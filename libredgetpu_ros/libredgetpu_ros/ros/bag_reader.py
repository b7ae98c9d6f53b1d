"""A bag's camera frames, read and decoded ahead of the pipeline (for ``process-bag``).

``FrameReader`` reads and decodes in a thread while the pipeline runs on the current frame. The thread
shares the GIL with inference (LiteRT's invoke holds it), so what it does under the GIL must be small:
uncompressed indexed MCAP is read without copies (``bags.mcap_view``: a message is a slice of a read-only
mmap, ~0.03 ms per frame with decoding, instead of rosbags' ~0.65 ms of copies holding the GIL), and
well-formed little-endian Images are viewed in place (``bags.cdr_image``); the one pixel copy (into a reused
buffer) runs without the GIL. Other bags (sqlite3, compressed) go through rosbags' reader; JPEG/PNG decoding
(OpenCV, which releases the GIL) overlaps inference.

A reader *process* was tried (rosbags + decoding in a child, pixels through a shared memfd ring): on the
2-core target it was slower than this thread (0.58 vs 0.92 of the pipeline's rate on the classify bag):
the child's copies compete for the second core with OpenCV's resize threads, and it adds ~0.2 s of start.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.bags.mcap_view import message_views
from libredgetpu_ros.bags.storage import IMAGE_TYPES, open_reader


@dataclass
class Decoded:
    """One input message, decoded the way the node decodes it, or why it could not be."""

    timestamp: int
    where: str
    stamp: tuple[int, int, str] | None = None  # the input header: (sec, nanosec, frame_id)
    rgb: np.ndarray | None = None
    cause: str = ""
    problem: str = ""


def decode(msgtype: str, topic: str, timestamp: int, raw: bytes | memoryview) -> Decoded:
    """Raw CDR -> header + RGB pixels with the node's decoders (``image_msgs``); rclpy parses the message
    unless it is a well-formed little-endian Image, which is viewed in place (``cdr_image``)."""
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import CompressedImage, Image

    from libredgetpu_ros.bags.cdr_image import parse_image
    from libredgetpu_ros.ros.image_msgs import BadImage, image_to_rgb, to_rgb

    where = f"{topic} at {timestamp}"
    cls = {IMAGE_TYPES[0]: Image, IMAGE_TYPES[1]: CompressedImage}.get(msgtype)
    if cls is None:
        return Decoded(timestamp, where, cause="unsupported_type",
                       problem=f"{where}: {msgtype} is not an image type")
    view = parse_image(raw) if cls is Image else None
    try:
        if view is not None:
            stamp = (view.sec, view.nanosec, view.frame_id)
            return Decoded(timestamp, where, stamp=stamp, rgb=image_to_rgb(view))
        try:
            msg = deserialize_message(bytes(raw), cls)
        except Exception as exc:  # rclpy raises its (unexported) RMWError on malformed CDR
            return Decoded(timestamp, where, cause="corrupt", problem=f"{where}: {exc}")
        stamp = (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id)
        return Decoded(timestamp, where, stamp=stamp, rgb=to_rgb(msg))
    except BadImage as exc:
        return Decoded(timestamp, where, cause=exc.cause, problem=f"{where}: {exc}")


def frames(reader: Any, topics: list[str], views: bool = True) -> Iterator[Decoded]:
    """The decoded messages of ``topics`` in bag order (zero-copy where ``mcap_view`` can, unless
    ``views`` is False)."""
    connections = [c for c in reader.connections if c.topic in topics]
    messages = message_views(reader, connections) if views else None
    if messages is None:
        messages = reader.messages(connections=connections)
    for conn, timestamp, raw in messages:
        yield decode(conn.msgtype, conn.topic, timestamp, raw)


class _Ring:
    """``size`` reusable frame buffers, so copies out of the bag's mmap land in memory that is already
    mapped (a fresh 0.9 MB array costs ~225 page faults; a mmap'ed page ~1/16 with the kernel's
    fault-around)."""

    def __init__(self, size: int) -> None:
        self._buffers: list[np.ndarray | None] = [None] * size
        self._next = 0

    def copy(self, pixels: np.ndarray) -> np.ndarray:
        i, self._next = self._next, (self._next + 1) % len(self._buffers)
        buf = self._buffers[i]
        if buf is None or buf.shape != pixels.shape or buf.dtype != pixels.dtype:
            buf = self._buffers[i] = np.empty_like(pixels, order="C")
        np.copyto(buf, pixels)  # NumPy releases the GIL for a copy this size
        return buf


class FrameReader:
    """The decoded frames of ``topics``, in bag order, read and decoded in a thread while the pipeline runs
    on the current frame. Use inside ``with``, then iterate; an error in the thread is re-raised there.

    A bounded queue of ``depth`` frames keeps memory flat. Raw frames viewed in the bag's mmap are copied
    by the thread into a ring of ``depth + 2`` buffers (the queue's frames, the consumer's, the one being
    filled): the page faults of first touching the file's pages and the copy run beside the pipeline, which
    then reads pixels already in memory, as it would from a camera driver's buffer.
    """

    _END = object()

    def __init__(self, bag: Path, topics: list[str], depth: int = 2) -> None:
        self._bag, self._topics = bag, topics
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._ring = _Ring(depth + 2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bag-prefetch", daemon=True)
        self._reader: Any = None

    def __enter__(self) -> FrameReader:
        self._reader = open_reader(self._bag)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        while self._thread.is_alive():  # unblock a put() waiting on a full queue
            with contextlib.suppress(queue.Empty):
                self._queue.get_nowait()
            self._thread.join(timeout=0.05)
        self._reader.close()

    def __iter__(self) -> Iterator[Decoded]:
        """Frames in bag order; a frame's pixels stay valid until the next frame is asked for."""
        while (item := self._queue.get()) is not self._END:
            if isinstance(item, BaseException):
                raise item
            yield item

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=0.1)
                return True
        return False

    def _run(self) -> None:
        try:
            for frame in frames(self._reader, self._topics):
                if frame.rgb is not None and not frame.rgb.flags.writeable:  # a view into the bag
                    frame.rgb = self._ring.copy(frame.rgb)
                if not self._put(frame):
                    return
        except BaseException as exc:  # surfaced in the consuming thread
            self._put(exc)
            return
        self._put(self._END)
