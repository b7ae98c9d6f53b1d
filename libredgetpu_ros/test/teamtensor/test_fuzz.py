"""Seeded malformed, truncated, oversized and random datagrams against the worker and the Data Source.

Worker: 10,000 invalid datagrams over UDP to a ``tt-worker`` process, in bursts small enough for the socket
buffer, each burst followed by a valid probe from a Data Source (so none is lost in the kernel). Afterwards
the worker's weights, metrics, managers and queue are what they were, its memory did not grow beyond a
bound, and its exit counters show every one of the 10,000 rejected.

Data Source: a fake worker (the real worker state machine behind a socket) answers each of 500 requests
with 20 invalid datagrams (mutated replies with the right request id, other ids, random, oversized) before
the true reply. Every answer is still right and every invalid datagram is counted.

Half the candidates are sealed again with a valid CRC-32 after the mutation, so they reach the decoders
behind the integrity check. A candidate that happens to be valid (a mutation of a weight value is still a
valid ASN_MD) is not sent: the codec itself is the oracle that filters them, and the state checks catch an
oracle that lets one through.
"""

from __future__ import annotations

import asyncio
import socket
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor import DataSource, datagrams, packets
from libredgetpu_ros.teamtensor.model import ModelSpec, linear
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, FRAGMENT_HEADER, Metric
from libredgetpu_ros.teamtensor.worker import WorkerConfig, WorkerCore

from .._helpers import load_helper

pytestmark = [pytest.mark.timeout(120)]
TRAILER = 12  # session, request id, CRC-32 (reliable framing, no key)

HERE = Path(__file__).resolve().parent
training = load_helper(HERE / "_training.py")

N_WORKER = 10_000
BURST = 20
N_SOURCE_REQUESTS = 500
RSS_GROWTH_KB = 30_000  # bound on the worker's resident memory growth over the whole fuzz run
PER_CASE_S = 0.05  # no single datagram may take the worker longer than this (checked on the sync probes)


def _fragment_header_ok(body: memoryview | bytes) -> bool:
    if len(body) <= FRAGMENT_HEADER.size:
        return False
    _, total, offset, _ = FRAGMENT_HEADER.unpack(bytes(body[:FRAGMENT_HEADER.size]))
    return 0 < total <= DEFAULT_WIRE.max_packet and offset + len(body) - FRAGMENT_HEADER.size <= total


def worker_would_accept(d: bytes) -> bool:
    try:
        _, body = datagrams.split(d)
    except ProtocolError:
        return False
    if len(body) and body[0] == DEFAULT_WIRE.fragment_opcode:
        return _fragment_header_ok(body)
    try:
        packets.decode_request(body)
        return True
    except ProtocolError:
        return False


def source_would_accept(d: bytes, rid: int, req: packets.Request) -> bool:
    try:
        got, body = datagrams.split(d)
    except ProtocolError:
        return False
    if got != rid:
        return False
    if len(body) and body[0] == DEFAULT_WIRE.fragment_opcode:
        return _fragment_header_ok(body)
    try:
        packets.decode_reply(req, body)
        return True
    except packets.Refused:
        return True
    except ProtocolError:
        return False


def mutant(valid: bytes, rng: np.random.Generator) -> bytes:
    """One candidate datagram derived from ``valid`` (or not) by a random strategy."""
    kind = rng.integers(0, 100)
    if kind < 25:  # truncated
        return valid[: rng.integers(0, len(valid))]
    if kind < 45:  # a few bytes overwritten (length fields, counts, codes, ids)
        out = bytearray(valid)
        for pos in rng.integers(0, len(out), rng.integers(1, 5)):
            out[pos] = rng.integers(0, 256)
        return bytes(out)
    if kind < 55:  # extended
        return valid + rng.integers(0, 256, rng.integers(1, 64), dtype=np.uint8).tobytes()
    if kind < 70:  # random bytes
        return rng.integers(0, 256, rng.integers(0, 1500), dtype=np.uint8).tobytes()
    if kind < 78:  # length/count fields set to their maximum ("allocation bombs")
        out = bytearray(valid)
        start = rng.integers(1, max(2, len(out) - 4))
        out[start:start + 4] = b"\xff\xff\xff\xff"
        return bytes(out)
    if kind < 86:  # fragments with impossible totals or offsets
        total = int(rng.choice([0, DEFAULT_WIRE.max_packet + 1, 0xFFFFFFFF, 10]))
        offset = int(rng.integers(0, 1 << 32))
        data = rng.integers(0, 256, rng.integers(0, 100), dtype=np.uint8).tobytes()
        return FRAGMENT_HEADER.pack(DEFAULT_WIRE.fragment_opcode, total, offset, 0) + data + valid[-4:]
    if kind < 94:  # unknown opcode
        return bytes([int(rng.integers(0x0D, 0x100))]) + rng.integers(0, 256, rng.integers(0, 40),
                                                                       dtype=np.uint8).tobytes()
    if kind < 99:  # oversized: larger than any packet of ours fits in one datagram
        return rng.integers(0, 256, rng.integers(1500, 9000), dtype=np.uint8).tobytes()
    return rng.integers(0, 256, 60_000, dtype=np.uint8).tobytes()


def _model() -> ModelSpec:
    rng = np.random.default_rng(0)
    return ModelSpec([linear(rng.normal(size=(3, 5)).astype(np.float32))], [Metric.MSE, Metric.MAE])


def _valid_requests() -> list[bytes]:
    rng = np.random.default_rng(1)
    reqs = [packets.Hello(), packets.AssignPipeline(3), packets.AssignModel(3, 1, _model()),
            packets.ProbeManagers(), packets.ProbeQueue(), packets.GetMetric(1, Metric.MSE),
            packets.GetModel(1),
            packets.Batch(rng.normal(size=(4, 5)), rng.normal(size=(4, 3))),
            packets.Batch(rng.normal(size=(200, 5)), rng.normal(size=(200, 3)), evaluate=True)]
    out = []
    for i, req in enumerate(reqs):
        out += datagrams.to_datagrams(packets.encode_request(req), 1000 + i)
    return out


def _invalid(seeds: list[bytes], accept, rng: np.random.Generator) -> bytes:
    """Half the candidates are mutated datagrams (the integrity tag catches them), half mutated packets
    sealed again with a valid trailer and CRC-32, so that they reach the decoders behind the tag."""
    while True:
        valid = seeds[rng.integers(0, len(seeds))]
        if rng.random() < 0.5:
            d = mutant(valid, rng)
        else:
            cut = len(valid) - TRAILER
            head = mutant(valid[:cut], rng) + valid[cut:-4]
            d = head + zlib.crc32(head).to_bytes(4, "big")
        if not accept(d):
            return d


async def _fuzz_worker(address: tuple[str, int], rss) -> dict:
    rng = np.random.default_rng(2024)
    seeds = _valid_requests()
    fuzz = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    fuzz.bind(("127.0.0.1", 0))
    async with DataSource(address, **training.FAST_RETRIES) as src:
        await src.hello(timeout=20.0)
        await src.assign_pipeline(3)
        await src.assign_model(3, 1, _model())
        x = rng.normal(size=(16, 5)).astype(np.float32)
        for _ in range(3):
            await src.send_batch(x, x[:, :3] * 2.0)
        before = await src.get_model(1)
        loss = await src.metric(1, Metric.MSE)
        rss_before = rss()
        sent, slowest = 0, 0.0
        while sent < N_WORKER:
            for _ in range(min(BURST, N_WORKER - sent)):
                fuzz.sendto(_invalid(seeds, worker_would_accept, rng), address)
                sent += 1
            t0 = time.perf_counter()
            assert await src.queue_has_space() is True  # the worker is alive and has read the burst
            slowest = max(slowest, time.perf_counter() - t0)
        after = await src.get_model(1)
        assert await src.metric(1, Metric.MSE) == loss
        assert await src.managers_available() == 3
        rss_after = rss()
    fuzz.close()
    assert all(np.array_equal(a, b) for a, b in zip(before.parameters(), after.parameters(), strict=True))
    return {"sent": sent, "rss_growth_kb": rss_after - rss_before, "slowest_burst_s": slowest}


def test_worker_survives_ten_thousand_invalid_datagrams():
    with training.worker_process() as worker:
        result = asyncio.run(_fuzz_worker(worker.address, worker.rss_kb))
    stats = worker.stats
    assert result["sent"] == N_WORKER
    assert stats["rejected_total"] == N_WORKER, stats["rejected"]
    assert stats["batch_errors"] == 0
    assert result["rss_growth_kb"] < RSS_GROWTH_KB, result
    assert result["slowest_burst_s"] < BURST * PER_CASE_S + 1.0, result


# --------------------------------------------------------------------------------------------------


class _HostileWorker(asyncio.DatagramProtocol):
    """A real worker state machine that precedes every reply with ``per_reply`` invalid datagrams."""

    def __init__(self, per_reply: int, seed: int) -> None:
        self.core = WorkerCore(WorkerConfig(queue_capacity=4))
        self.rng = np.random.default_rng(seed)
        self.per_reply = per_reply
        self.garbage = 0
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        # Sent through a duplicate of the socket: asyncio's sendto() silently skips empty datagrams.
        fd = transport.get_extra_info("socket").fileno()
        self.raw = socket.fromfd(fd, socket.AF_INET, socket.SOCK_DGRAM)

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        rid, body = datagrams.split(data)
        replies = self.core.handle(addr, data)
        if not replies:
            return
        req = packets.decode_request(body) if body[0] != DEFAULT_WIRE.fragment_opcode else None
        seeds = replies + [r[:-4] + (rid + 1).to_bytes(4, "big") for r in replies]
        for _ in range(self.per_reply):
            if req is None:  # a fragmented request (a big batch): its reply is a plain ACK
                req = packets.Batch(np.zeros((1, 1)), np.zeros((1, 1)))
            d = _invalid(seeds, lambda c, r=req: source_would_accept(c, rid, r), self.rng)
            self.raw.sendto(d, addr)
            self.garbage += 1
        for r in replies:
            self.raw.sendto(r, addr)


async def _fuzz_source() -> None:
    loop = asyncio.get_running_loop()
    transport, hostile = await loop.create_datagram_endpoint(lambda: _HostileWorker(BURST, 7),
                                                             local_addr=("127.0.0.1", 0))
    address = transport.get_extra_info("sockname")[:2]
    rng = np.random.default_rng(8)
    try:
        # A generous timeout: a retransmission would make the fake worker send its garbage twice.
        async with DataSource(address, timeout=3.0) as src:
            await src.hello(timeout=10.0)
            await src.assign_pipeline(3)
            await src.assign_model(3, 1, _model())
            for i in range(N_SOURCE_REQUESTS - 3):
                kind = i % 4
                if kind == 0:
                    n = 8 if i % 8 else 300  # every other batch is fragmented
                    x = rng.normal(size=(n, 5)).astype(np.float32)
                    await src.send_batch(x, x[:, :3])
                elif kind == 1:
                    assert await src.queue_has_space() is (len(hostile.core.queue) < 4)
                elif kind == 2:
                    hostile.core.drain()
                    expect = hostile.core.managers[1].last[Metric.MAE]
                    assert await src.metric(1, Metric.MAE) == float(np.float32(expect))
                else:
                    got = await src.get_model(1)
                    expect = hostile.core.managers[1].model.parameters()
                    assert all(np.array_equal(a, b) for a, b in zip(got.parameters(), expect, strict=True))
            assert src.stats.retransmissions == 0, "inconclusive: a timeout resent a request"
            assert src.stats.rejected_total == hostile.garbage, src.stats.rejected
            assert hostile.garbage >= N_SOURCE_REQUESTS * BURST - 3 * BURST
            assert src._reassembler.pending_bytes == 0
    finally:
        hostile.raw.close()
        transport.close()


def test_source_counts_and_ignores_invalid_replies():
    asyncio.run(_fuzz_source())


# --------------------------------------------------------------------------------------------------
# Memory under hostile traffic from many ports (issue 27: stored replies were kept per peer).

N_HOSTILE = 20_000
HOSTILE_PORTS = 64
HOSTILE_RSS_GROWTH_KB = 10_240  # docs/teamtensor.md "Memory": peers without the session keep nothing


def _hostile(rng: np.random.Generator, port: int, seeds: list[bytes]) -> bytes:
    """Valid requests of a peer without the session (reads of the model, claims, probes), the start of a
    16 MiB fragmented packet, or a mutant; each sealed with the peer's own session number and a valid CRC."""
    kind = rng.integers(0, 5)
    if kind == 0:
        packet = packets.encode_request(packets.GetModel(1))
    elif kind == 1:
        packet = packets.encode_request(packets.AssignPipeline(int(rng.integers(0, 1 << 16))))
    elif kind == 2:
        packet = FRAGMENT_HEADER.pack(DEFAULT_WIRE.fragment_opcode, DEFAULT_WIRE.max_packet,
                                      int(rng.integers(0, 1 << 20)), 0) + bytes(1300)
    elif kind == 3:
        packet = packets.encode_request(packets.ProbeQueue())
    else:
        return _invalid(seeds, worker_would_accept, rng)
    return datagrams.to_datagrams(packet, int(rng.integers(1, 1 << 32)), session=port)[0]


async def _hostile_ports(address: tuple[str, int], rss) -> dict:
    rng = np.random.default_rng(27)
    seeds = _valid_requests()
    socks = []
    for _ in range(HOSTILE_PORTS):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        socks.append(s)
    big = ModelSpec([linear(np.zeros((128, 128), np.float32))], [Metric.MSE])  # GET_MD reply: 64 KiB
    try:
        async with DataSource(address, **training.FAST_RETRIES) as owner:
            await owner.hello(timeout=20.0)
            await owner.assign_pipeline(3)
            await owner.assign_model(3, 1, big)
            rss_before, sent = rss(), 0
            while sent < N_HOSTILE:
                for s in socks:  # one datagram from each port per burst
                    s.sendto(_hostile(rng, s.getsockname()[1], seeds), address)
                    sent += 1
                assert await owner.queue_has_space() is True  # alive, and has read the burst
            trained = await owner.get_model(1)
            rss_after = rss()
    finally:
        for s in socks:
            s.close()
    assert trained.layers[0].weights.shape == (128, 128)
    return {"sent": sent, "rss_growth_kb": rss_after - rss_before}


def test_worker_memory_under_twenty_thousand_hostile_datagrams_from_64_ports():
    with training.worker_process() as worker:
        result = asyncio.run(_hostile_ports(worker.address, worker.rss_kb))
    assert result["sent"] >= N_HOSTILE
    print(f"hostile ports: {result}")
    assert result["rss_growth_kb"] < HOSTILE_RSS_GROWTH_KB, result
    assert worker.stats["sessions"] == {"claimed": 1, "released": 1}  # nobody else got the worker
    assert worker.stats["refused"].get("BUSY", 0) > N_HOSTILE // 10


def test_the_remote_crash_packets_leave_tt_worker_serving():
    """Issue 27 failure 2 against the process: a ~60-byte ASN_MD (1x1 Conv2D, pad 20000, stride 60000) and a
    ~30-byte BATCH made the old worker allocate 5.96 GiB (uncaught MemoryError). Now: BAD_MODEL, nothing
    allocated, the worker keeps serving and exits 0 (worker_process checks the exit code)."""
    from libredgetpu_ros.teamtensor.model import conv2d

    bomb = ModelSpec([conv2d(np.ones((1, 1, 1, 1), np.float32), None, pad=20000, stride=60000, out_width=1,
                             out_height=1)], [Metric.MSE])

    async def run(address, rss) -> int:
        async with DataSource(address, **training.FAST_RETRIES) as src:
            await src.hello(timeout=20.0)
            await src.assign_pipeline(1)
            before = rss()
            with pytest.raises(packets.Refused, match="BAD_MODEL"):
                await src.assign_model(1, 1, bomb)
            with pytest.raises(packets.Refused, match="UNKNOWN_MODEL"):
                await src.send_batch(np.ones((1, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32))
            assert await src.managers_available() == 4
            return rss() - before

    with training.worker_process() as worker:
        growth_kb = asyncio.run(run(worker.address, worker.rss_kb))
    assert growth_kb < 10_240
    assert worker.stats["refused"]["BAD_MODEL"] == 1
    assert worker.stats["rejected"].get("internal error", 0) == 0
