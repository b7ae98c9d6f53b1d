"""``process-bag``'s output side: each frame's result messages serialized (rclpy) and written into the output
bag, in frame order, on a thread behind the pipeline or inline.

With ``thread=True`` the frame loop hands the messages over in batches of ``batch`` frames, or fewer once
their byte arrays (an Image's pixels, ...) reach ``batch_bytes`` (the thread is woken once a batch, not
once a frame; a queue of ``depth`` batches: the loop waits when the writer falls that far behind, so
memory stays flat, annotated images included) and goes on with the next frames' inference while this thread
serializes and writes them; one thread, one FIFO queue, so the output holds the same messages in the same
order as the inline writer. The thread never dies silently: its exception is
re-raised by the next :meth:`ResultWriter.write` and by :meth:`ResultWriter.close`. Every call into the
rosbags writer (connections, messages) happens on that one thread until :meth:`close` has joined it.
"""

from __future__ import annotations

import array
import contextlib
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any

from libredgetpu_ros.bags.storage import reliable_qos
from libredgetpu_ros.bags.typestore import typestore
from libredgetpu_ros.ros.bag_threads import yield_to_pipeline

_POLL_S = 0.1  # how often a waiting loop looks at the other side's state


def _data_bytes(messages: list[tuple[str, Any]]) -> int:
    """The size of the messages' top-level byte arrays (``data``: Image, CompressedImage, PointCloud2...),
    where nearly all of a large message's bytes are; small messages count 0."""
    size = 0
    for _, msg in messages:
        data = getattr(msg, "data", None)
        if isinstance(data, bytes | bytearray | array.array):
            size += len(data)
    return size


def type_name(cls: type) -> str:
    """``pkg/msg/Name`` of a generated rclpy message class."""
    return f"{cls.__module__.split('.')[0]}/msg/{cls.__name__}"


@functools.cache
def serializer(cls: type) -> Callable[[Any], bytes]:
    """rclpy's serializer of ``cls``, its type support loaded and checked once (``serialize_message`` checks
    it on every call: a few microseconds a message)."""
    from rclpy.impl.implementation_singleton import rclpy_implementation
    from rclpy.type_support import check_for_type_support

    check_for_type_support(cls)
    serialize = rclpy_implementation.rclpy_serialize
    return lambda msg: serialize(msg, cls)


class ResultWriter:
    """Writes ``(bag timestamp, [(relative topic, message), ...])`` per frame into ``writer`` (an opened
    rosbags writer); topics resolved by ``resolve`` and typed by ``out_types`` (see module docstring)."""

    _END = object()

    def __init__(self, writer: Any, resolve: Callable[[str], str], out_types: dict[str, type], *,
                 thread: bool, depth: int = 2, batch: int = 16, batch_bytes: int = 4 << 20) -> None:
        self._writer, self._resolve, self._out_types = writer, resolve, out_types
        self._conns: dict[str, tuple[Any, type, Callable[[Any], bytes]]] = {}
        self.written = 0  # messages written (read it after close())
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._batch: list[tuple[int, list[tuple[str, Any]]]] = []
        self._batch_size, self._batch_max_bytes, self._batch_bytes = batch, batch_bytes, 0
        self._thread: threading.Thread | None = None
        if thread:
            self._thread = threading.Thread(target=self._run, name="bag-writer", daemon=True)
            self._thread.start()

    @property
    def threaded(self) -> bool:
        return self._thread is not None

    def write(self, timestamp: int, messages: list[tuple[str, Any]]) -> None:
        """One frame's messages (written now, or queued for the thread); the thread's error, if it died."""
        if self._thread is None:
            self._write(timestamp, messages)
            return
        self._batch.append((timestamp, messages))
        self._batch_bytes += _data_bytes(messages)
        if len(self._batch) >= self._batch_size or self._batch_bytes >= self._batch_max_bytes:
            self._hand_over(self._batch)  # the batch stays ours until queued (a Ctrl-C while waiting)

    def close(self, finish: bool = True) -> None:
        """Stop the thread: after writing what is queued (``finish``), or after the frame it is writing
        (an error path: the output is discarded). Re-raises the thread's error when finishing."""
        thread = self._thread
        if thread is None:
            return
        try:
            if finish and self._error is None and thread.is_alive():
                if self._batch:
                    self._hand_over(self._batch)
                self._hand_over(self._END)
            elif not finish:
                self._stop.set()
            thread.join()
        except BaseException:  # a second Ctrl-C while waiting: stop after the current frame
            self._stop.set()
            thread.join()
            raise
        finally:
            self._thread = None
        if finish and self._error is not None:
            raise self._error

    def _hand_over(self, item: Any) -> None:
        """Queue ``item`` for the thread, waiting for room; the pending batch is emptied only once it is
        queued, so a KeyboardInterrupt while waiting leaves it to :meth:`close` (the Ctrl-C path writes it).
        The queue's put count (``unfinished_tasks``, never decremented here) tells whether it was queued."""
        puts = self._queue.unfinished_tasks
        try:
            while True:
                if self._error is not None:
                    raise self._error
                if self._thread is None or not self._thread.is_alive():
                    raise RuntimeError("process-bag's writer thread has stopped")
                with contextlib.suppress(queue.Full):
                    self._queue.put(item, timeout=_POLL_S)
                    return
        finally:
            if item is self._batch and self._queue.unfinished_tasks != puts:
                self._batch, self._batch_bytes = [], 0

    def _run(self) -> None:
        yield_to_pipeline()  # behind the pipeline's thread for a core (bag_threads.HELPER_NICE)
        try:
            while not self._stop.is_set():
                try:
                    item = self._queue.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if item is self._END:
                    return
                for timestamp, messages in item:
                    if self._stop.is_set():
                        return
                    self._write(timestamp, messages)
        except BaseException as exc:  # re-raised in the frame loop's thread (write / close)
            self._error = exc

    def _write(self, timestamp: int, messages: list[tuple[str, Any]]) -> None:
        for topic, msg in messages:
            entry = self._conns.get(topic)
            if entry is None:
                cls = self._out_types[topic]
                conn = self._writer.add_connection(self._resolve(topic), type_name(cls),
                                                   typestore=typestore(),
                                                   offered_qos_profiles=[reliable_qos(5)])
                entry = self._conns[topic] = (conn, cls, serializer(cls))
            conn, cls, serialize = entry
            if type(msg) is not cls:  # not its topic's declared type (never, from the nodes): as what it is
                serialize = serializer(type(msg))
            self._writer.write(conn, timestamp, serialize(msg))
            self.written += 1
