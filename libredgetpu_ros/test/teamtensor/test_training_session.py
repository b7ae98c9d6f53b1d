"""The trainer's Data Source thread (``ros/trainer/session.py``, no rclpy) against a ``tt-worker`` process:
losing the worker's session to another Data Source is a fault the node hears about, not a stream of lost
batches; stopping the session releases the worker for the next Data Source at once."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.ros.trainer.session import SessionLost, TrainingSession
from libredgetpu_ros.teamtensor import DataSource, ModelSpec, linear
from libredgetpu_ros.teamtensor.packets import Refused
from libredgetpu_ros.teamtensor.wire import Metric

from .._helpers import load_helper

pytestmark = [pytest.mark.timeout(60)]
training = load_helper(Path(__file__).resolve().parent / "_training.py")


def _session(address, on_fault=None) -> TrainingSession:
    model = ModelSpec([linear(np.zeros((2, 3), np.float32))], [Metric.MSE])
    return TrainingSession(address, model, on_fault=on_fault, **training.FAST_RETRIES)


async def _claim(address, pipeline: int) -> None:  # claims the worker, releases it on leaving
    async with DataSource(address, **training.FAST_RETRIES) as other:
        await other.hello(timeout=5.0)
        await other.assign_pipeline(pipeline)


@pytest.mark.parametrize("held", [True, False], ids=["busy", "taken-and-released"])
def test_a_session_taken_over_is_a_fault_not_lost_batches(held):
    """The other Data Source still holds the worker (the batch gets BUSY) or has released it again
    (NO_PIPELINE): either way the session is reported lost once, and no batch is counted as failed."""
    faults: list[BaseException] = []
    seen = threading.Event()

    def on_fault(exc: BaseException) -> None:
        faults.append(exc)
        seen.set()

    async def take_over(address, session: TrainingSession) -> None:
        async with DataSource(address, **training.FAST_RETRIES) as other:
            await other.hello(timeout=5.0)
            await other.assign_pipeline(9)
            if held:
                session.submit(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32))
                await asyncio.get_running_loop().run_in_executor(None, seen.wait, 10.0)

    with training.worker_process("--session-timeout", "0.2") as worker:
        session = _session(worker.address, on_fault)
        try:
            assert session.start(timeout=5.0) == 1
            time.sleep(0.4)  # silent longer than the worker's session timeout
            asyncio.run(take_over(worker.address, session))
            if not held:
                session.submit(np.ones((4, 3), np.float32), np.ones((4, 2), np.float32))
            assert seen.wait(10.0), "the lost session was never reported"
        finally:
            session.stop()
    assert len(faults) == 1 and isinstance(faults[0], SessionLost), faults
    assert ("BUSY" if held else "NO_PIPELINE") in str(faults[0])
    assert session.stats.batches_failed == 0
    assert worker.stats["sessions"]["taken over"] == 1


def test_stopping_a_session_releases_the_worker():
    with training.worker_process() as worker:  # default session timeout: 10 s
        session = _session(worker.address)
        assert session.start(timeout=5.0) == 1
        session.stop()
        asyncio.run(_claim(worker.address, pipeline=2))  # at once, no BUSY
        second = _session(worker.address)
        with pytest.raises(Refused, match="BUSY"):  # while the other holds it: configure would fail
            try:
                asyncio.run(_hold_and_try(worker.address, second))
            finally:
                second.stop()
    assert worker.stats["sessions"]["released"] >= 2 and "taken over" not in worker.stats["sessions"]


async def _hold_and_try(address, second: TrainingSession) -> None:
    async with DataSource(address, **training.FAST_RETRIES) as holder:
        await holder.hello(timeout=5.0)
        await holder.assign_pipeline(3)
        await asyncio.get_running_loop().run_in_executor(None, second.start, 5.0)
