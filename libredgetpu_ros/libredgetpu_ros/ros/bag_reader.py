"""A bag's camera frames, read and decoded for the pipeline (``process-bag``).

Raw ``Image`` frames of uncompressed indexed MCAP are read without copies: a message is a slice of a
read-only mmap of the file (``bags.mcap_view``) and a well-formed little-endian Image is viewed in place
(``bags.cdr_image``), ~0.03 ms per 640x480 frame, so the pipeline reads the pixels from the page cache.
rosbags' own reader copies every message three times (~0.65 ms per frame, holding the GIL).

:class:`FrameReader` reads on a thread ahead of the consumer (``thread=True``: process-bag's pipelined
loop, which leaves its own thread to inference), in the consumer's thread (``thread=False``: process-bag's
one-thread loop), or inline where that is cheap enough (``thread=None``: zero-copy frames inline,
everything else, sqlite3, compressed bags, ``CompressedImage``, on the thread, where rosbags' copies and
JPEG/PNG decoding, OpenCV releasing the GIL, overlap inference). Given the node's first stage
(``prepare``: perception's resize + quantize), the thread runs it on every decoded frame too, so the
consumer only runs inference and builds results. The thread hands frames over in batches,
so it wakes once per batch rather than once per frame. Chunk CRCs are verified by whichever thread walks
the bag, just before the chunk's messages are parsed (``bags.mcap_view``): no other thread.

Also measured and dropped: a reader *process* (rosbags + decoding in a child, pixels through a shared
memfd ring) was slower than the thread (0.58 vs 0.92 of the pipeline's rate on the classify bag), and
copying frames out of the mmap into reused buffers (no page faults for the pipeline) was slower than
reading them where they are (measured again with a reused 64-byte-aligned buffer: no faster either,
bench/results/process_bag.md).
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from libredgetpu_ros.bags.mcap_view import message_views
from libredgetpu_ros.bags.storage import IMAGE_TYPES, Unreadable, decompressed, open_reader
from libredgetpu_ros.bags.storage import messages as bag_messages
from libredgetpu_ros.ros.bag_threads import yield_to_pipeline
from libredgetpu_ros.textdata import clip_repr

_MAX_BYTES_PER_PIXEL = 8  # a per-message compressed frame may decompress to 8 bytes a pixel (rgba16) + 1 MiB


def max_message_bytes(max_pixels: int) -> int:
    """The decompressed size allowed to a per-message compressed payload of a frame of up to ``max_pixels``:
    8 bytes a pixel (rgba16) plus 1 MiB of headers; a larger one is skipped, never decompressed whole."""
    return _MAX_BYTES_PER_PIXEL * max_pixels + (1 << 20)


@dataclass(slots=True)
class Decoded:
    """One input message, decoded the way the node decodes it, or why it could not be."""

    timestamp: int
    topic: str
    stamp: tuple[int, int, str] | None = None  # the input header: (sec, nanosec, frame_id)
    rgb: np.ndarray | None = None
    cause: str = ""
    problem: str = ""
    prepared: Any = None  # the node's first stage on rgb (``CameraProcessor.prepare``), when run ahead

    @property
    def where(self) -> str:
        """Where the frame is, for messages (built only when one is needed: ~0.5 us a frame otherwise)."""
        return f"{self.topic} at {self.timestamp}"


@functools.cache
def _decoders() -> SimpleNamespace:
    """rclpy and the node's decoders, imported once (not at module import, which stays light; and not per
    frame: four from-imports cost a few microseconds on every frame of a fast model)."""
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import CompressedImage, Image

    from libredgetpu_ros.bags.cdr_image import parse_image
    from libredgetpu_ros.ros.image_msgs import DEFAULT_MAX_PIXELS, BadImage, image_to_rgb, to_rgb

    return SimpleNamespace(deserialize=deserialize_message, types={IMAGE_TYPES[0]: Image,
                                                                   IMAGE_TYPES[1]: CompressedImage},
                           Image=Image, parse_image=parse_image, BadImage=BadImage, image_to_rgb=image_to_rgb,
                           to_rgb=to_rgb, default_max_pixels=DEFAULT_MAX_PIXELS)


def decode(msgtype: str, topic: str, timestamp: int, raw: bytes | memoryview,
           max_pixels: int | None = None) -> Decoded:
    """Raw CDR -> header + RGB pixels with the node's decoders (``image_msgs``); rclpy parses the message
    unless it is a well-formed little-endian Image, which is viewed in place (``cdr_image``). Frames over
    ``max_pixels`` (default: the node's default budget) fail as ``too_large`` before decoding."""
    d = _decoders()
    budget = d.default_max_pixels if max_pixels is None else max_pixels
    cls = d.types.get(msgtype)
    if cls is None:
        return _failed(timestamp, topic, "unsupported_type", f"{msgtype} is not an image type")
    view = d.parse_image(raw) if cls is d.Image else None
    try:
        if view is not None:
            stamp = (view.sec, view.nanosec, view.frame_id)
            return Decoded(timestamp, topic, stamp=stamp, rgb=d.image_to_rgb(view, budget))
        try:
            msg = d.deserialize(bytes(raw), cls)
        except Exception as exc:  # rclpy raises its (unexported) RMWError on malformed CDR
            return _failed(timestamp, topic, "corrupt", str(exc))
        stamp = (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id)
        return Decoded(timestamp, topic, stamp=stamp, rgb=d.to_rgb(msg, budget))
    except d.BadImage as exc:
        return _failed(timestamp, topic, exc.cause, str(exc))


def _failed(timestamp: int, topic: str, cause: str, text: str) -> Decoded:
    frame = Decoded(timestamp, topic, cause=cause)
    frame.problem = f"{frame.where}: {text}"
    return frame


def frames(reader: Any, topics: list[str], views: bool = True,
           max_pixels: int | None = None) -> Iterator[Decoded]:
    """The decoded messages of ``topics`` in bag order (through ``mcap_view`` where it can: zero-copy for
    uncompressed chunks, a damaged chunk skipped also when compressed; unless ``views`` is False);
    ``max_pixels``: see :func:`decode`."""
    connections = [c for c in reader.connections if c.topic in topics]
    pixels = _decoders().default_max_pixels if max_pixels is None else max_pixels
    max_bytes = max_message_bytes(pixels)
    per_message = getattr(reader, "compression_mode", None) == "message"
    messages = message_views(reader, connections, compressed=True, per_message=True) if views else None
    if messages is None:  # rosbags' own reading, typed errors, bounded per-message decompression
        messages = bag_messages(reader, connections, max_bytes)
    elif per_message:
        messages = decompressed(messages, max_bytes)
    for conn, timestamp, raw in messages:
        if raw is None:  # in an MCAP chunk that failed its checks (bags.mcap_view): never decoded
            yield _failed(timestamp, conn.topic, "corrupt_chunk",
                          "in a chunk failing its CRC, size, decompression or bounds checks")
        elif isinstance(raw, Unreadable):  # a per-message compressed payload over budget or damaged
            yield _failed(timestamp, conn.topic, "corrupt", raw.reason)
        elif type(timestamp) is not int or not isinstance(raw, bytes | memoryview):
            # a sqlite3 row is typed by what was stored: TEXT or INTEGER data, a TEXT timestamp
            yield _failed(timestamp if type(timestamp) is int else 0, conn.topic, "corrupt",
                          _bad_row(timestamp, raw))
        else:
            yield decode(conn.msgtype, conn.topic, timestamp, raw, max_pixels)


def _bad_row(timestamp: object, raw: object) -> str:
    if type(timestamp) is not int:
        return f"its timestamp is {clip_repr(timestamp, 40)} ({type(timestamp).__name__}), not an integer"
    return f"its data is {clip_repr(raw, 40)} ({type(raw).__name__}), not a BLOB"


def inline(reader: Any, topics: list[str]) -> bool:
    """Whether ``topics`` are cheap enough to read in the pipeline's thread: raw Images, zero-copy."""
    connections = [c for c in reader.connections if c.topic in topics]
    raw_images = all(c.msgtype == IMAGE_TYPES[0] for c in connections)
    return raw_images and message_views(reader, connections) is not None


class FrameReader:
    """The decoded frames of ``topics``, in bag order: inline or from a reader thread (module docstring;
    ``thread`` forces the choice). Use inside ``with``, then iterate; an error in the thread is re-raised
    by the iteration, after the frames read before it. The thread hands frames over in batches (up to
    ``BATCH_FRAMES`` frames or ``BATCH_BYTES`` of pixels, so it is woken once a batch, not once a frame)
    through a queue of ``depth`` batches, which keeps the thread's memory flat. With ``hold``, the thread
    hands over the first frame alone and reads on only after :meth:`resume` (process-bag: the first frame
    warms the model up, then the clock starts, and no frame is read or prepared ahead off the clock)."""

    _END = object()
    BATCH_FRAMES = 16  # fewer wake-ups and thread switches than 4 (docs/bags.md); views cost no memory
    BATCH_BYTES = 16 << 20

    def __init__(self, bag: Path, topics: list[str], depth: int = 1, thread: bool | None = None,
                 max_pixels: int | None = None, prepare: Callable[[np.ndarray], Any] | None = None,
                 hold: bool = False) -> None:
        # thread: True (a reader thread), False (the consumer's thread, whatever the bag), None (module doc);
        # prepare: run on each decoded frame by the thread that decodes it, kept as its ``prepared`` (the
        # node's first stage, ``CameraProcessor.prepare_or_unprepared``: it never raises for a frame)
        self._bag, self._topics, self._use_thread, self._max_pixels = bag, topics, thread, max_pixels
        self._prepare = prepare
        self._resumed = threading.Event()
        if not hold:
            self._resumed.set()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: Any = None

    @property
    def threaded(self) -> bool:
        return self._thread is not None

    def __enter__(self) -> FrameReader:
        self._reader = open_reader(self._bag)
        use_thread = self._use_thread
        if use_thread is None:
            use_thread = not inline(self._reader, self._topics)
        if use_thread:
            self._thread = threading.Thread(target=self._run, name="bag-prefetch", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        while self._thread is not None and self._thread.is_alive():  # unblock a put() on a full queue
            with contextlib.suppress(queue.Empty):
                self._queue.get_nowait()
            self._thread.join(timeout=0.05)
        self._reader.close()

    def __iter__(self) -> Iterator[Decoded]:
        """Frames in bag order; a frame's pixels stay valid at least until the next frame is asked for."""
        if self._thread is None:
            yield from self._frames()
            return
        while (item := self._queue.get()) is not self._END:
            if isinstance(item, BaseException):
                raise item
            yield from item

    def _frames(self) -> Iterator[Decoded]:
        """The decoded frames, each prepared (``prepare``) when it decoded."""
        prepare = self._prepare
        for frame in frames(self._reader, self._topics, max_pixels=self._max_pixels):
            if prepare is not None and frame.rgb is not None:
                frame.prepared = prepare(frame.rgb)
            yield frame

    def resume(self) -> None:
        """Let a ``hold`` reader thread read on past the first frame."""
        self._resumed.set()

    def _wait_resumed(self) -> bool:
        while not self._resumed.wait(0.1):
            if self._stop.is_set():
                return False
        return not self._stop.is_set()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=0.1)
                return True
        return False

    def _run(self) -> None:
        yield_to_pipeline()
        batch: list[Decoded] = []
        size = 0
        try:
            for frame in self._frames():
                batch.append(frame)
                size += frame.rgb.nbytes if frame.rgb is not None else 0
                held = not self._resumed.is_set()
                if held or len(batch) >= self.BATCH_FRAMES or size >= self.BATCH_BYTES:
                    if not self._put(batch):
                        return
                    batch, size = [], 0
                    if held and not self._wait_resumed():
                        return
        except BaseException as exc:  # surfaced in the consuming thread, after the frames before it
            if not batch or self._put(batch):
                self._put(exc)
            return
        if not batch or self._put(batch):
            self._put(self._END)
