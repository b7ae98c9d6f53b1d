"""A Team Tensor Data Source on its own asyncio thread, driven from ROS callbacks (no rclpy here).

ROS callbacks must not block on the network, and the Data Source is asyncio: this class runs the event
loop in a daemon thread and exposes what the node needs as thread-safe calls. Samples become batches on the
loop thread and go to the worker one at a time; when the worker falls behind, at most ``max_backlog``
batches wait and the oldest is dropped (counted). A failed batch (timeout, refusal) is counted and logged,
never silent; training continues with the next one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.errors import LibrEdgeTpuError
from libredgetpu_ros.teamtensor import DataSource
from libredgetpu_ros.teamtensor.model import ModelSpec
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, Metric, WireFormat

log = logging.getLogger(__name__)


@dataclass
class SessionStats:
    batches_sent: int = 0
    samples_sent: int = 0
    batches_dropped: int = 0  # backlog overflow: the worker did not keep up
    batches_failed: int = 0
    last_error: str = ""


class TrainingSession:
    """One model on one worker: ``start()`` connects and uploads it, ``submit()`` queues training data."""

    def __init__(self, worker: tuple[str, int], model: ModelSpec, *, pipeline: int = 1, model_id: int = 1,
                 wire: WireFormat = DEFAULT_WIRE, max_backlog: int = 8, **source_options: Any) -> None:
        self.worker, self.model, self.pipeline, self.model_id = worker, model, pipeline, model_id
        self.wire, self.max_backlog, self.source_options = wire, max_backlog, source_options
        self.stats = SessionStats()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="tt_source")
        self._source: DataSource | None = None
        self._backlog: deque[tuple[np.ndarray, np.ndarray]] = deque()
        self._wake: asyncio.Event | None = None
        self._sender: asyncio.Task | None = None

    # ----- called from ROS threads -------------------------------------------------------------------

    def start(self, timeout: float) -> int:
        """Connect (HELLO), assign the pipeline and upload the model; returns the worker's model count."""
        self._thread.start()
        return self._call(self._connect(timeout), timeout + 5.0)

    def submit(self, inputs: np.ndarray, targets: np.ndarray) -> None:
        """Queue one batch for the worker (returns at once)."""
        self._loop.call_soon_threadsafe(self._enqueue, inputs, targets)

    def metrics(self, timeout: float) -> dict[Metric, float]:
        return self._call(self._metrics(), timeout)

    def trained_model(self, timeout: float) -> ModelSpec:
        return self._call(self._source_call("get_model", self.model_id), timeout)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(timeout=5.0)
        self._loop.close()

    def _call(self, coro: Coroutine, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # ----- on the loop thread -------------------------------------------------------------------------

    async def _connect(self, timeout: float) -> int:
        self._source = DataSource(self.worker, self.wire, **self.source_options)
        await self._source.open()
        await self._source.hello(timeout=timeout)
        await self._source.assign_pipeline(self.pipeline)
        count = await self._source.assign_model(self.pipeline, self.model_id, self.model)
        self._wake = asyncio.Event()
        self._sender = asyncio.ensure_future(self._send_loop())
        return count

    async def _source_call(self, name: str, *args: Any) -> Any:
        if self._source is None:
            raise LibrEdgeTpuError("training session is not connected")
        return await getattr(self._source, name)(*args)

    async def _metrics(self) -> dict[Metric, float]:
        return {m: await self._source_call("metric", self.model_id, m) for m in self.model.metrics}

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
                except LibrEdgeTpuError as exc:
                    self.stats.batches_failed += 1
                    self.stats.last_error = str(exc)
                    log.error("batch of %d samples not delivered: %s", len(inputs), exc)
                    continue
                self.stats.batches_sent += 1
                self.stats.samples_sent += len(inputs)

    def _shutdown(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
        if self._source is not None:
            self._source.close()
        self._loop.stop()
