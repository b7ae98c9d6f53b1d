"""Issue 27's numbered failures, datagram by datagram against the worker's state machine (no sockets).

1. corrupted request ids (a corrupted copy trained twice, poisoning the next id, locking the source out) and a
   flipped value byte acknowledged and trained on; 2. the 117-byte remote crash (a Conv2D whose padding asks
   for gigabytes); 3. stored replies evicted by junk from other ports, and replies that reflect traffic;
   4. another address taking the worker over. On the code before this change each of these tests fails:
   every datagram was accepted without an integrity check, any address could assign a pipeline, each peer's
   last 64 replies were stored for 32 peers (least recently seen evicted), and the model was never sized.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.teamtensor import datagrams, packets
from libredgetpu_ros.teamtensor.model import ModelSpec, conv2d, linear
from libredgetpu_ros.teamtensor.wire import Metric, Refusal
from libredgetpu_ros.teamtensor.worker import WorkerConfig, WorkerCore

from .._helpers import load_helper

_driver = load_helper(Path(__file__).resolve().parent / "_driver.py")
Driver = _driver.Driver

TRAILER = 12  # [session u32][request id u32][CRC-32 u32]


def _model(out: int = 2, inp: int = 3) -> ModelSpec:
    return ModelSpec([linear(np.zeros((out, inp), np.float32))], [Metric.MSE, Metric.MAE])


def _batch(seed: int = 0, n: int = 4) -> packets.Batch:
    rng = np.random.default_rng(seed)
    x, t = rng.normal(size=(n, 3)), rng.normal(size=(n, 2))
    return packets.Batch(x.astype(np.float32), t.astype(np.float32))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def owner() -> Driver:
    drv = Driver(WorkerCore(WorkerConfig(managers=2, queue_capacity=4), clock=Clock()))
    assert drv.ask(packets.AssignPipeline(5)) == 5
    assert drv.ask(packets.AssignModel(5, 1, _model())) == 1
    return drv


def _sealed(drv: Driver, req: packets.Request, rid: int) -> bytes:
    (d,) = datagrams.to_datagrams(packets.encode_request(req), rid, session=drv.session)
    return d


def _with_byte(d: bytes, pos: int, value: int) -> bytes:
    out = bytearray(d)
    out[pos] = value
    return bytes(out)


# 1. Corrupted request ids and values ------------------------------------------------------------------


def test_a_copy_with_a_corrupted_id_is_not_a_new_request(owner):
    rid = next(owner.ids)
    d = _sealed(owner, _batch(), rid)
    assert owner.core.handle(owner.peer, d)
    id_at = len(d) - 8  # the request id's last byte: rid, rid ^ 0x01 ... are all still plausible ids
    for value in range(256):
        if value != d[id_at]:
            assert owner.core.handle(owner.peer, _with_byte(d, id_at, value)) == []
    assert owner.core.stats.executed["Batch"] == 1 and len(owner.core.queue) == 1
    assert owner.core.stats.rejected["integrity"] == 255


def test_a_corrupted_id_landing_on_the_next_id_does_not_poison_it(owner):
    rid = next(owner.ids)
    d = _sealed(owner, _batch(seed=1), rid)
    poisoned = _with_byte(d, len(d) - 5, (rid + 1) & 0xFF)  # the copy now claims the next request's id
    assert owner.core.handle(owner.peer, d) and owner.core.handle(owner.peer, poisoned) == []
    owner.core.drain()
    assert owner.ask(_batch(seed=2)) is None  # the real next BATCH: acknowledged *and* queued
    assert owner.core.stats.executed["Batch"] == 2 and len(owner.core.queue) == 1


def test_a_corrupted_high_id_cannot_lock_the_source_out(owner):
    rid = next(owner.ids)
    d = _sealed(owner, _batch(seed=3), rid)
    high = _with_byte(d, len(d) - 8, 0xFF)  # the id's top byte: an id far ahead of every later one
    assert owner.core.handle(owner.peer, high) == []
    owner.core.handle(owner.peer, d)
    for i in range(200):  # far more than the old 64-reply window after which later ids turned "stale"
        owner.core.drain()
        assert owner.ask(_batch(seed=10 + i)) is None
    assert owner.core.stats.rejected["stale request id"] == 0
    assert owner.core.stats.executed["Batch"] == 201


def test_a_flipped_value_byte_in_a_single_datagram_batch_is_not_trained(owner):
    rid = next(owner.ids)
    d = _sealed(owner, _batch(seed=4), rid)
    value_at = 3 + 5 + 2  # opcode, sample count, input tensor header [1][3]: a byte of the first input value
    assert owner.core.handle(owner.peer, _with_byte(d, value_at, d[value_at] ^ 0x40)) == []
    assert owner.core.stats.executed["Batch"] == 0 and not owner.core.queue


# 2. The remote crash ---------------------------------------------------------------------------------


def _padding_bomb() -> ModelSpec:
    """One 1x1 filter, pad 20000, stride 60000, output 1x1: a 1x1 input padded to 40001x40001 (6 GB)."""
    return ModelSpec([conv2d(np.ones((1, 1, 1, 1), np.float32), None, pad=20000, stride=60000, out_width=1,
                             out_height=1)], [Metric.MSE])


def test_a_model_whose_training_exceeds_the_budget_is_refused_before_anything_is_allocated():
    drv = Driver(WorkerCore())
    drv.ask(packets.AssignPipeline(1))
    bomb = packets.AssignModel(1, 1, _padding_bomb())
    rid, out = drv.raw(bomb)
    request_bytes = len(datagrams.to_datagrams(packets.encode_request(bomb), rid)[0])
    assert request_bytes - TRAILER < 100  # the 92 + 25 bytes
    assert drv.replies(rid, out) == bytes([0x03, Refusal.BAD_MODEL])
    with pytest.raises(packets.Refused, match="UNKNOWN_MODEL"):  # the 25-byte BATCH has no model to reach
        drv.ask(packets.Batch(np.ones((1, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32)))
    assert not drv.core.managers and not drv.core.queue


def test_a_batch_whose_training_exceeds_the_budget_is_refused():
    drv = Driver(WorkerCore(WorkerConfig(memory_budget=1 << 20)))
    drv.ask(packets.AssignPipeline(1))
    drv.ask(packets.AssignModel(1, 1, ModelSpec([linear(np.zeros((2, 300), np.float32))], [Metric.MSE])))
    drv.ask(packets.Batch(np.ones((8, 300), np.float32), np.ones((8, 2), np.float32)))  # within 1 MiB
    with pytest.raises(packets.Refused, match="OVER_BUDGET"):
        drv.ask(packets.Batch(np.ones((1000, 300), np.float32), np.ones((1000, 2), np.float32)))
    assert len(drv.core.queue) == 1


def test_no_exception_in_handling_or_training_ends_the_worker(owner, monkeypatch):
    from libredgetpu_ros.teamtensor import worker

    def out_of_memory(*args, **kwargs):
        raise MemoryError("simulated")

    owner.ask(_batch())
    monkeypatch.setattr(worker.nn, "train_step", out_of_memory)
    owner.core.drain()  # the queued batch fails for the model, counted and logged
    assert owner.core.stats.batch_errors == 1 and not owner.core.queue
    monkeypatch.setattr(worker, "decode_request", out_of_memory)
    assert owner.core.handle(owner.peer, _sealed(owner, _batch(), next(owner.ids))) == []
    assert owner.core.stats.rejected["internal error"] == 1
    monkeypatch.undo()
    assert owner.ask(packets.ProbeManagers()) == 1  # still serving


# 3. Stored replies: eviction and amplification --------------------------------------------------------


def test_junk_from_other_ports_neither_evicts_stored_replies_nor_replays_a_batch(owner):
    rid = next(owner.ids)
    first = owner.core.handle(owner.peer, _sealed(owner, _batch(seed=5), rid))
    owner.core.drain()
    for port in range(41000, 41064):  # 64 other peers, 10 valid requests each
        other = Driver(owner.core, ("127.0.0.1", port), session=port)
        for _ in range(10):
            other.raw(packets.GetModel(1))
            other.raw(packets.ProbeQueue())
    again = owner.core.handle(owner.peer, _sealed(owner, _batch(seed=5), rid))  # a late network duplicate
    assert again == first and owner.core.stats.duplicates == 1
    assert owner.core.stats.executed["Batch"] == 1 and not owner.core.queue


def test_replies_to_peers_without_the_session_are_at_most_twice_their_request(owner):
    big = ModelSpec([linear(np.zeros((512, 512), np.float32))], [Metric.MSE])  # a 1 MiB model
    assert owner.ask(packets.AssignModel(5, 2, big)) == 2
    stranger = Driver(owner.core, ("127.0.0.1", 42000), session=99)
    requests = [packets.Hello(), packets.ProbeManagers(), packets.ProbeQueue(), packets.GetModel(2),
                packets.GetMetric(2, Metric.MSE), packets.AssignModel(5, 3, _model()), _batch(),
                packets.AssignPipeline(6), packets.Release()]
    for req in requests:
        rid = next(stranger.ids)
        sent = sum(len(d) for d in datagrams.to_datagrams(packets.encode_request(req), rid, session=99))
        got = sum(len(d) for d in stranger.raw(req, rid)[1])
        assert 0 < got <= 2 * sent, (req, sent, got)
    assert owner.core.stats.refused["BUSY"] == 6
    assert owner.ask(packets.GetModel(2)).layers[0].weights.shape == (512, 512)  # the owner still reads it


def test_stored_replies_stay_within_their_byte_budget(owner):
    core = owner.core
    for i in range(300):
        owner.ask(_batch(seed=i))
        core.drain()
    session = core.session
    assert len(session.replies) <= core.config.reply_cache
    assert session.reply_bytes == sum(len(d) for r in session.replies.values() for d in r)
    assert session.reply_bytes <= core.config.reply_budget


# 4. Sessions: no takeover -------------------------------------------------------------------------------


def test_another_address_cannot_take_the_worker_over(owner):
    weights = owner.core.managers[1].model.parameters()
    thief = Driver(owner.core, ("127.0.0.1", 43000), session=7)
    with pytest.raises(packets.Refused, match="BUSY"):
        thief.ask(packets.AssignPipeline(9))
    with pytest.raises(packets.Refused, match="BUSY"):
        thief.ask(packets.AssignModel(5, 1, _model()))
    assert owner.core.pipeline == 5 and list(owner.core.managers) == [1]
    assert all(np.array_equal(a, b) for a, b in zip(owner.core.managers[1].model.parameters(), weights,
                                                    strict=True))
    # The same address with another session number (a restarted Data Source) is another session too.
    restarted = Driver(owner.core, owner.peer, session=owner.session + 1)
    with pytest.raises(packets.Refused, match="BUSY"):
        restarted.ask(packets.AssignPipeline(5))


def test_the_worker_passes_on_after_release_or_silence(owner):
    clock = owner.core.clock
    second = Driver(owner.core, ("127.0.0.1", 43001), session=8)
    assert owner.ask(packets.Release()) is None
    assert second.ask(packets.AssignPipeline(5)) == 5  # same pipeline: the models stay
    assert list(owner.core.managers) == [1]
    clock.now += owner.core.config.session_timeout - 1.0
    with pytest.raises(packets.Refused, match="BUSY"):  # not silent long enough
        owner.ask(packets.AssignPipeline(5))
    clock.now += 2.0
    late = _sealed(second, _batch(), next(second.ids))  # second's datagram, delayed past the takeover
    assert owner.ask(packets.AssignPipeline(6)) == 6
    assert owner.core.stats.sessions["taken over"] == 1
    reply = owner.core.handle(second.peer, late)
    assert datagrams.Framer().open(reply[0]).body.tobytes() == bytes([0x03, Refusal.BUSY])
    assert not owner.core.queue
