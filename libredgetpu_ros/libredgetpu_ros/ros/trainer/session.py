"""A Team Tensor Data Source on its own asyncio thread, driven from ROS callbacks (no rclpy here).

ROS callbacks must not block on the network, and the Data Source is asyncio: this class runs the event
loop in a daemon thread and exposes what the node needs as calls that return at once. Samples become
batches on the loop thread and go to the worker one at a time; when the worker falls behind, at most
``max_backlog`` batches wait and the oldest is dropped (counted). A failed batch (timeout, refusal) is
counted and logged, never silent; training continues with the next one. A batch refused BUSY or NO_PIPELINE
means the worker's session is no longer ours: that is fatal (:class:`SessionLost`), not a lost batch.

Reads (metrics, trained model) are :meth:`TrainingSession.fetch`: a ``concurrent.futures.Future`` of one
:class:`Snapshot`, bounded by a deadline on the loop thread. The node starts one, goes back to its executor,
and takes the result when the future completes: no ROS thread ever waits for the worker, except ``start``
(the configure transition, whose outcome *is* the connection).

Faults: an exception that is not a protocol outcome (a bug, a dead socket) ending the sender task, escaping
a loop callback or stopping the loop thread is *fatal*: handed once to ``on_fault`` (from the loop thread),
or without one logged with its traceback; the session does no more work and must be stopped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.errors import LibrEdgeTpuError, traceback_text
from libredgetpu_ros.teamtensor import DataSource
from libredgetpu_ros.teamtensor.model import ModelSpec
from libredgetpu_ros.teamtensor.packets import Refused
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, Metric, Refusal, WireFormat

log = logging.getLogger(__name__)


@dataclass
class SessionStats:
    batches_sent: int = 0
    samples_sent: int = 0
    batches_dropped: int = 0  # backlog overflow: the worker did not keep up
    batches_failed: int = 0
    last_error: str = ""


@dataclass(frozen=True)
class Snapshot:
    """What one fetch read: the session's counters when it started, the worker's metrics (empty before the
    first batch: there is nothing to measure) and, when asked for, the trained model."""

    stats: SessionStats
    metrics: dict[Metric, float]
    model: ModelSpec | None
    taken: float  # time.monotonic() when the reads completed


class SessionFault(LibrEdgeTpuError):
    """The session's loop thread failed; the session must be stopped (and may be started anew)."""


class SessionLost(LibrEdgeTpuError):
    """A batch was refused BUSY (another Data Source holds the worker) or NO_PIPELINE (one took it over and
    released it since): our session went silent too long and was taken. Fatal like a fault of the loop
    thread: the node goes through ErrorProcessing and can configure again."""


SESSION_GONE = (Refusal.BUSY, Refusal.NO_PIPELINE)  # answers to a BATCH that mean our session is gone


class TrainingSession:
    """One model on one worker: ``start()`` connects and uploads it, ``submit()`` queues training data,
    ``fetch()`` reads metrics and weights without blocking the caller.

    ``logger`` receives one preformatted string per call (``error`` / ``warning``): a Python logger or a ROS
    node's logger. ``on_fault(exc)`` is called once, from the loop thread, on a fatal fault (and must report
    it: the session then does not log it).
    """

    def __init__(self, worker: tuple[str, int], model: ModelSpec, *, pipeline: int = 1, model_id: int = 1,
                 wire: WireFormat = DEFAULT_WIRE, max_backlog: int = 8, logger: Any = log,
                 on_fault: Callable[[BaseException], None] | None = None, **source_options: Any) -> None:
        self.worker, self.model, self.pipeline, self.model_id = worker, model, pipeline, model_id
        self.wire, self.max_backlog, self.source_options = wire, max_backlog, source_options
        self.logger, self.on_fault = logger, on_fault
        self.stats = SessionStats()
        self.fault: BaseException | None = None
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._on_loop_exception)
        self._thread = threading.Thread(target=self._run, daemon=True, name="tt_source")
        self._source: DataSource | None = None
        self._backlog: deque[tuple[np.ndarray, np.ndarray]] = deque()
        self._wake: asyncio.Event | None = None
        self._sender: asyncio.Task | None = None

    # ----- called from ROS threads -------------------------------------------------------------------

    def start(self, timeout: float) -> int:
        """Connect (HELLO), assign the pipeline and upload the model; returns the worker's model count.
        Blocks the caller for at most ``timeout`` (+ the model upload's own retries)."""
        self._thread.start()
        return self._submit(lambda: self._connect(timeout)).result(timeout + 5.0)

    def submit(self, inputs: np.ndarray, targets: np.ndarray) -> None:
        """Queue one batch for the worker (returns at once)."""
        if self.fault is None:
            self._loop.call_soon_threadsafe(self._enqueue, inputs, targets)

    def fetch(self, *, model: bool, timeout: float) -> concurrent.futures.Future:
        """Start reading the metrics (and the trained model if ``model``); returns at once. The future holds
        a :class:`Snapshot`, or ``TimeoutError`` after ``timeout`` s (the worker is busy with a batch or does
        not answer), or the protocol error."""
        return self._submit(lambda: asyncio.wait_for(self._fetch(model), timeout))

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._loop.close()

    def _submit(self, make: Callable[[], Coroutine]) -> concurrent.futures.Future:
        # The coroutine is made only once it will run: one made and dropped warns "never awaited" (and
        # closing a wait_for() wrapper leaves the coroutine inside it unawaited).
        if self.fault is not None or not self._thread.is_alive():
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_exception(SessionFault(f"training session is not running: {self.fault}"))
            return future
        return asyncio.run_coroutine_threadsafe(make(), self._loop)

    # ----- on the loop thread -------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop.run_forever()
        except BaseException as exc:  # the loop itself died: nothing else would ever say so
            self._fatal(exc, "the event loop stopped")

    async def _connect(self, timeout: float) -> int:
        self._source = DataSource(self.worker, self.wire, **self.source_options)
        await self._source.open()
        await self._source.hello(timeout=timeout)
        await self._source.assign_pipeline(self.pipeline)
        count = await self._source.assign_model(self.pipeline, self.model_id, self.model)
        self._wake = asyncio.Event()
        self._sender = asyncio.ensure_future(self._send_loop())
        self._sender.add_done_callback(self._on_sender_done)
        return count

    async def _source_call(self, name: str, *args: Any) -> Any:
        if self._source is None:
            raise LibrEdgeTpuError("training session is not connected")
        return await getattr(self._source, name)(*args)

    async def _fetch(self, model: bool) -> Snapshot:
        stats = dataclasses.replace(self.stats)  # copied here: only this thread writes the counters
        metrics = {}
        if stats.batches_sent:
            metrics = {m: await self._source_call("metric", self.model_id, m) for m in self.model.metrics}
        trained = await self._source_call("get_model", self.model_id) if model else None
        return Snapshot(stats, metrics, trained, time.monotonic())

    def _enqueue(self, inputs: np.ndarray, targets: np.ndarray) -> None:
        self._backlog.append((inputs, targets))
        while len(self._backlog) > self.max_backlog:
            self._backlog.popleft()
            self.stats.batches_dropped += 1
        if self._wake is not None:
            self._wake.set()

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._backlog:
                inputs, targets = self._backlog.popleft()
                try:
                    await self._source.send_batch(inputs, targets)
                except Refused as exc:
                    if exc.reason in SESSION_GONE:  # our session (and model) are gone: nothing to send
                        raise SessionLost(f"the worker's session was taken over by another Data Source "
                                          f"(after {self.stats.batches_sent} batches): {exc}") from exc
                    self._batch_failed(inputs, exc)
                    continue
                except LibrEdgeTpuError as exc:  # timeout or refusal: this batch is lost, not the session
                    self._batch_failed(inputs, exc)
                    continue
                self.stats.batches_sent += 1
                self.stats.samples_sent += len(inputs)

    def _batch_failed(self, inputs: np.ndarray, exc: Exception) -> None:
        self.stats.batches_failed += 1
        self.stats.last_error = str(exc)
        self.logger.error(f"batch of {len(inputs)} samples not delivered: {exc}")

    def _on_sender_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._fatal(task.exception(), "the batch sender stopped")

    def _on_loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if exc is None:  # asyncio's own notices (e.g. a slow callback): log, keep going
            self.logger.warning(f"Team Tensor session: {context.get('message')}")
            return
        self._fatal(exc, context.get("message", "a loop callback failed"))

    def _fatal(self, exc: BaseException, what: str) -> None:
        if self.fault is not None:
            return
        self.fault = exc
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()
        if self.on_fault is not None:
            self.on_fault(exc)  # which logs it, with the traceback
        else:
            trace = traceback_text(exc)
            self.logger.error(f"Team Tensor session failed ({what}): {type(exc).__name__}: {exc}\n{trace}")

    def _shutdown(self) -> None:
        tasks = asyncio.all_tasks(self._loop)  # the sender and any read in flight
        for task in tasks:
            task.cancel()

        async def stop_when_cancelled() -> None:  # a task stopped mid-flight would be reported as pending
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)
            if self._source is not None:  # free the worker for the next Data Source (bounded, best effort)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._source.release(), 1.5)
                self._source.close()
            self._loop.stop()

        self._loop.create_task(stop_when_cancelled())
