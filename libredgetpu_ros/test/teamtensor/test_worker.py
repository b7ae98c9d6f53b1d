"""The worker's state machine driven datagram by datagram (no sockets): queue, managers, exactly-once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.teamtensor import datagrams, packets
from libredgetpu_ros.teamtensor.model import ModelSpec, linear
from libredgetpu_ros.teamtensor.wire import Metric, WireFormat
from libredgetpu_ros.teamtensor.worker import WorkerConfig, WorkerCore

from .._helpers import load_helper

_driver = load_helper(Path(__file__).resolve().parent / "_driver.py")
Driver, PEER = _driver.Driver, _driver.PEER


def _model(out: int = 2, inp: int = 3) -> ModelSpec:
    return ModelSpec([linear(np.zeros((out, inp), np.float32))], [Metric.MSE, Metric.MAE])


def _batch(n: int = 4, evaluate: bool = False, seed: int = 0) -> packets.Batch:
    rng = np.random.default_rng(seed)
    x, t = rng.normal(size=(n, 3)), rng.normal(size=(n, 2))
    return packets.Batch(x.astype(np.float32), t.astype(np.float32), evaluate)


@pytest.fixture
def drv() -> Driver:
    d = Driver(WorkerCore(WorkerConfig(managers=2, queue_capacity=3)))
    assert d.ask(packets.AssignPipeline(5)) == 5
    return d


def test_batch_queue_answers_b_full_from_real_occupancy(drv):
    assert drv.ask(packets.ProbeQueue()) is True
    with pytest.raises(packets.Refused, match="UNKNOWN_MODEL"):
        drv.ask(_batch())  # no model to train yet
    assert drv.ask(packets.AssignModel(5, 1, _model())) == 1
    for i in range(3):
        assert drv.ask(packets.ProbeQueue()) is True
        drv.ask(_batch(seed=i))
    assert len(drv.core.queue) == 3
    assert drv.ask(packets.ProbeQueue()) is False
    with pytest.raises(packets.Refused, match="QUEUE_FULL"):
        drv.ask(_batch())
    assert drv.core.step()
    assert drv.ask(packets.ProbeQueue()) is True


def test_model_managers_pipelines_and_refusals(drv):
    assert drv.ask(packets.ProbeManagers()) == 2
    assert drv.ask(packets.AssignModel(5, 1, _model())) == 1
    assert drv.ask(packets.AssignModel(5, 2, _model())) == 2
    assert drv.ask(packets.ProbeManagers()) == 0
    with pytest.raises(packets.Refused, match="NO_MANAGER"):
        drv.ask(packets.AssignModel(5, 3, _model()))
    with pytest.raises(packets.Refused, match="WRONG_PIPELINE"):
        drv.ask(packets.AssignModel(6, 1, _model()))
    with pytest.raises(packets.Refused, match="SHAPE_MISMATCH"):
        drv.ask(packets.Batch(np.ones((2, 4), np.float32), np.ones((2, 2), np.float32)))
    with pytest.raises(packets.Refused, match="NO_DATA"):
        drv.ask(packets.GetMetric(1, Metric.MSE))
    with pytest.raises(packets.Refused, match="UNKNOWN_METRIC"):
        drv.ask(packets.GetMetric(1, Metric.ACCURACY))
    with pytest.raises(packets.Refused, match="UNKNOWN_MODEL"):
        drv.ask(packets.GetModel(9))
    assert drv.ask(packets.AssignPipeline(6)) == 6  # a new pipeline frees every manager
    assert drv.ask(packets.ProbeManagers()) == 2
    fresh = Driver(WorkerCore())
    with pytest.raises(packets.Refused, match="NO_PIPELINE"):
        fresh.ask(packets.AssignModel(5, 1, _model()))


def test_every_model_of_the_pipeline_trains_on_each_batch_and_eval_does_not_update(drv):
    drv.ask(packets.AssignModel(5, 1, _model()))
    drv.ask(packets.AssignModel(5, 2, _model()))
    drv.ask(_batch(seed=1))
    w1 = drv.ask(packets.GetModel(1)).layers[0].weights  # reads train what is queued first
    w2 = drv.ask(packets.GetModel(2)).layers[0].weights
    assert w1.any() and np.array_equal(w1, w2)
    loss = drv.ask(packets.GetMetric(1, Metric.MSE))
    drv.ask(_batch(seed=2, evaluate=True))
    assert np.array_equal(drv.ask(packets.GetModel(1)).layers[0].weights, w1)
    assert drv.ask(packets.GetMetric(1, Metric.MSE)) != loss  # metrics of the evaluation batch
    assert drv.core.managers[1].batches == 2


def test_duplicates_are_answered_from_the_cache_and_executed_once(drv):
    drv.ask(packets.AssignModel(5, 1, _model()))
    rid, first = drv.raw(_batch())
    _, again = drv.raw(_batch(), rid=rid)
    assert again == first and len(drv.core.queue) == 1
    assert drv.core.stats.executed["Batch"] == 1 and drv.core.stats.duplicates == 1


def test_stale_ids_are_dropped_not_replayed():
    drv = Driver(WorkerCore(WorkerConfig(reply_cache=4)))
    drv.ask(packets.AssignPipeline(1))
    drv.ask(packets.AssignModel(1, 1, _model()))
    rid, _ = drv.raw(_batch())
    for i in range(6):  # state-changing requests: their stored replies push the first one out
        drv.ask(_batch(seed=i))
        drv.core.drain()
    _, out = drv.raw(_batch(), rid=rid)  # a copy delayed past the reply cache
    assert out == [] and drv.core.stats.rejected["stale request id"] == 1
    assert drv.core.stats.executed["Batch"] == 7 and not drv.core.queue


def test_a_fragmented_request_reassembles_once_from_reordered_duplicated_datagrams(drv):
    drv.ask(packets.AssignModel(5, 1, _model()))
    batch = _batch(n=500)
    parts = datagrams.to_datagrams(packets.encode_request(batch), 4242, session=drv.session)
    assert len(parts) > 5
    order = np.random.default_rng(3).permutation(len(parts))
    replies = []
    for i in [*order[::-1], *order]:  # every datagram twice, in two different orders
        replies += drv.core.handle(drv.peer, parts[i])
    assert drv.core.stats.executed["Batch"] == 1 and len(drv.core.queue) == 1
    assert len(replies) == 2 and replies[0] == replies[1]  # answered, then answered again from the cache
    assert np.array_equal(drv.core.queue[0].inputs, batch.inputs)


def test_a_worker_filled_to_its_limits_keeps_less_than_its_memory_bound():
    """docs/teamtensor.md *Memory*: what a worker really keeps (tracemalloc) with every part full -- its
    models as large as a packet allows, its batch queue, a fragmented packet half received, its stored
    replies -- stays under ``memory_bound()`` less the training step (none runs: the queue is only filled),
    and is most of it (the parts were filled). Small packets keep the test small; the bound scales with
    ``max_packet``."""
    import gc
    import tracemalloc

    wire = WireFormat(max_packet=256 * 1024)
    config = WorkerConfig(managers=2, queue_capacity=3, max_pending=1, memory_budget=16 << 20)
    rows, cols, samples = 60, 1000, 60  # a 240,000-byte model; 60 samples of 1000 + 60 values: 254,400 bytes

    def fill() -> tuple[WorkerCore, int]:
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        core = WorkerCore(config, wire)
        drv = Driver(core)
        drv.ask(packets.AssignPipeline(5))
        for model_id in (1, 2):
            weights = np.full((rows, cols), 0.5, np.float32)
            drv.ask(packets.AssignModel(5, model_id, ModelSpec([linear(weights)], [Metric.MSE])))
        rng = np.random.default_rng(0)
        for _ in range(config.queue_capacity):
            drv.ask(packets.Batch(rng.normal(size=(samples, cols)).astype(np.float32),
                                  rng.normal(size=(samples, rows)).astype(np.float32)))
        more = packets.Batch(np.zeros((samples, cols), np.float32), np.zeros((samples, rows), np.float32))
        parts = datagrams.to_datagrams(packets.encode_request(more), 999, session=drv.session)
        for part in parts[: len(parts) // 2]:  # half a packet: held in reassembly
            core.handle(drv.peer, part)
        del weights, more, parts, drv
        gc.collect()
        return core, tracemalloc.get_traced_memory()[0] - base

    tracemalloc.start()
    try:
        fill()  # once before measuring: the modules and caches the first requests load are not the worker's
        core, kept = fill()
    finally:
        tracemalloc.stop()
    assert len(core.queue) == config.queue_capacity and len(core.managers) == 2
    filled = 2 * rows * cols * 4 + config.queue_capacity * samples * (rows + cols) * 4
    assert filled <= kept <= config.memory_bound(wire) - config.memory_budget, (filled, kept)
    half = WireFormat(max_packet=wire.max_packet, value_dtype=">f2")  # float16 weights widen to float32
    assert config.memory_bound(half) - config.memory_bound(wire) == config.managers * wire.max_packet


def test_a_diverging_step_is_not_applied_and_the_model_can_still_be_read(drv):
    """Found by test/fuzz/test_fuzz_teamtensor.py: huge finite weights overflowed to inf in one SGD step, and
    GET_MD then failed inside the worker (a descriptor carries finite weights only): no answer, ever."""
    huge = ModelSpec([linear(np.full((2, 3), 3e38, np.float32))], [Metric.MSE])
    drv.ask(packets.AssignModel(5, 1, huge))
    drv.ask(packets.Batch(np.full((4, 3), 1e3, np.float32), np.zeros((4, 2), np.float32)))
    read = drv.ask(packets.GetModel(1))  # trains the batch first
    assert np.array_equal(read.layers[0].weights, huge.layers[0].weights)
    assert drv.core.stats.diverged == 1 and drv.core.stats.rejected.get("internal error", 0) == 0
