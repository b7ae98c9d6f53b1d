"""framing = seed: interoperability with peers written from design seed 004's tables alone.

1. A seed-literal Data Source, written here with plain ``socket`` + ``struct`` (+ NumPy for the column-major
   values; nothing of our codec), runs HELLO, ASN_DP, ASN_MD, M_FULL, B_FULL, BATCH, GET_MT and GET_MD
   against ``libredgetpu-ros tt-worker --framing seed`` in another process. Every reply has the seed's exact
   bytes; the trained weights equal an SGD step computed here independently (float32, 1e-6).
2. Our ``DataSource`` with ``framing=seed`` trains against a seed-literal worker stub written here the same
   way (it parses the seed's packets and does its own SGD); the weights it reads back equal our NumPy
   training's.
3. HELLO by broadcast (SO_BROADCAST) to 127.255.255.255, only inside a private network namespace
   (tools/ros_sandbox.sh): the source learns the worker's address from its answer.

Where the seed is silent we use docs/teamtensor.md's documented choices: values are big-endian float32,
a Linear layer carries its bias tensor after its weights, metric code 0x01 is MSE.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.teamtensor import DataSource, ModelSpec, WireFormat, linear, nn
from libredgetpu_ros.teamtensor.wire import Metric

from .._helpers import load_helper

pytestmark = [pytest.mark.timeout(120)]
training = load_helper(Path(__file__).resolve().parent / "_training.py")

HELLO, ACK, NACK, ASN_DP, ASN_MD, M_FULL, B_FULL, BATCH, GET_MT, GET_MD = range(1, 11)
LINEAR, MSE = 0x01, 0x01
LR = training.LEARNING_RATE


def tensor(a: np.ndarray) -> bytes:
    """The seed: [ndim u8][dim u16]... then the values, column-major (big-endian float32, our choice)."""
    a = np.asarray(a, np.float32)
    return struct.pack(">B", a.ndim) + b"".join(struct.pack(">H", d) for d in a.shape) + \
        a.astype(">f4").tobytes(order="F")


def read_tensor(buf: bytes, pos: int) -> tuple[np.ndarray, int]:
    (ndim,) = struct.unpack_from(">B", buf, pos)
    shape = struct.unpack_from(f">{ndim}H", buf, pos + 1)
    pos += 1 + 2 * ndim
    count = int(np.prod(shape))
    values = np.frombuffer(buf, ">f4", count, pos).reshape(shape, order="F").astype(np.float32)
    return values, pos + 4 * count


def descriptor(w: np.ndarray, b: np.ndarray) -> bytes:
    """[layers u8][code u8][weights][bias][metrics u8][codes]: one Linear layer, MSE."""
    return struct.pack(">BB", 1, LINEAR) + tensor(w) + tensor(b) + struct.pack(">BB", 1, MSE)


def sgd(w: np.ndarray, b: np.ndarray, x: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """One MSE SGD step on a Linear layer, written out here (float32): new weights, new bias, loss before."""
    y = x @ w.T + b
    g = np.float32(2.0) * (y - t) / np.float32(y.size)
    return w - np.float32(LR) * (g.T @ x), b - np.float32(LR) * g.sum(axis=0), float(np.mean((y - t) ** 2))


def _problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=(2, 3)).astype(np.float32)
    b0 = np.array([0.1, -0.2], np.float32)
    batches = [(rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=(4, 2)).astype(np.float32))
               for _ in range(3)]
    return w0, b0, batches


# 1. A seed-literal Data Source against tt-worker --framing seed --------------------------------------------


def test_seed_literal_data_source_against_tt_worker():
    w0, b0, batches = _problem()
    with training.worker_process("--framing", "seed", "--value-dtype", ">f4") as worker:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(5.0)
        s.bind(("127.0.0.1", 0))

        def ask(packet: bytes) -> bytes:
            s.sendto(packet, worker.address)
            reply, addr = s.recvfrom(65535)
            assert addr[:2] == worker.address
            return reply

        try:
            assert ask(bytes([HELLO])) == bytes([ACK])  # the seed's 1-byte HELLO and ACK
            assert ask(struct.pack(">BH", ASN_DP, 7)) == struct.pack(">BH", ACK, 7)
            desc = descriptor(w0, b0)
            asn_md = struct.pack(">BHHII", ASN_MD, 7, 1, len(desc), 1) + desc + struct.pack(">BB", 1, MSE)
            assert ask(asn_md) == struct.pack(">BH", ACK, 1)  # one model in pipeline 7
            assert ask(bytes([M_FULL])) == struct.pack(">BH", ACK, 3)  # 4 managers, 1 used
            w, b = w0, b0
            for x, t in batches:
                assert ask(bytes([B_FULL])) == bytes([ACK])  # room in the batch queue
                samples = b"".join(tensor(xi) + tensor(ti) for xi, ti in zip(x, t, strict=True))
                s.sendto(struct.pack(">BH", BATCH, len(x)) + samples, worker.address)  # no reply in the seed
                w, b, loss = sgd(w, b, x, t)
            reply = ask(struct.pack(">BB", GET_MT, MSE))
            assert len(reply) == 5 and reply[0] == ACK
            assert struct.unpack(">f", reply[1:])[0] == pytest.approx(loss, rel=1e-6)
            reply = ask(struct.pack(">BH", GET_MD, 1))
            assert reply[0] == ACK and reply[1:3] == bytes([1, LINEAR])
            got_w, pos = read_tensor(reply, 3)
            got_b, pos = read_tensor(reply, pos)
            assert reply[pos:] == struct.pack(">BB", 1, MSE)
            np.testing.assert_allclose(got_w, w, rtol=0, atol=1e-6)
            np.testing.assert_allclose(got_b, b, rtol=0, atol=1e-6)
            assert ask(struct.pack(">BH", GET_MD, 9)) == bytes([NACK, 5])  # unknown model: NACK, its reason
        finally:
            s.close()
    assert worker.stats["executed"]["Batch"] == len(batches)


# 2. Our Data Source (framing=seed) against a seed-literal worker stub -----------------------------------


class SeedWorkerStub:
    """A worker written from the seed's tables: one Linear model, SGD with the learning rate above."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.address = self.sock.getsockname()
        self.w = self.b = None
        self.loss = float("nan")
        self.batches = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                p, addr = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            reply = self._answer(p)
            if reply is not None:
                self.sock.sendto(reply, addr)

    def _answer(self, p: bytes) -> bytes | None:
        op = p[0]
        if op == HELLO:
            return bytes([ACK])
        if op == ASN_DP:
            return bytes([ACK]) + p[1:3]
        if op == ASN_MD:
            _, _, _, size, layers = struct.unpack_from(">BHHII", p)
            assert layers == 1 and p[13:15] == bytes([1, LINEAR])
            self.w, pos = read_tensor(p, 15)
            self.b, pos = read_tensor(p, pos)
            assert pos + 2 == 13 + size and p[13 + size:] == struct.pack(">BB", 1, MSE)
            return struct.pack(">BH", ACK, 1)
        if op == M_FULL:
            return struct.pack(">BH", ACK, 0)
        if op == B_FULL:
            return bytes([ACK])
        if op == BATCH:
            (n,) = struct.unpack_from(">H", p, 1)
            pos, xs, ts = 3, [], []
            for _ in range(n):
                x, pos = read_tensor(p, pos)
                t, pos = read_tensor(p, pos)
                xs.append(x)
                ts.append(t)
            assert pos == len(p)
            self.w, self.b, self.loss = sgd(self.w, self.b, np.stack(xs), np.stack(ts))
            self.batches += 1
            return None  # the seed's BATCH has no reply
        if op == GET_MT:
            assert len(p) == 2 and p[1] == MSE  # [GET_MT][metric id]: no model id in the seed
            return bytes([ACK]) + struct.pack(">f", self.loss)
        if op == GET_MD:
            return bytes([ACK]) + descriptor(self.w, self.b)
        return bytes([NACK])

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5.0)
        self.sock.close()


def test_our_data_source_with_seed_framing_trains_against_a_seed_literal_worker():
    w0, b0, batches = _problem(seed=3)
    stub = SeedWorkerStub()
    wire = WireFormat(framing="seed")

    async def run() -> tuple[ModelSpec, float]:
        async with DataSource(stub.address, wire, timeout=0.5) as src:
            await src.hello(timeout=5.0)
            await src.assign_pipeline(1)
            assert await src.assign_model(1, 1, ModelSpec([linear(w0, b0)], [Metric.MSE])) == 1
            assert await src.managers_available() == 0
            for x, t in batches:
                await src.send_batch(x, t)
            for _ in range(100):  # the BATCH has no reply: wait until the stub has trained all of them
                if stub.batches == len(batches):
                    break
                await asyncio.sleep(0.01)
            return await src.get_model(1), await src.metric(1, Metric.MSE)

    try:
        trained, loss = asyncio.run(run())
    finally:
        stub.close()
    reference = ModelSpec([linear(w0, b0)], [Metric.MSE])
    for x, t in batches:
        last = nn.train_step(reference, x, t, LR, 2)
    np.testing.assert_allclose(trained.layers[0].weights, reference.layers[0].weights, rtol=0, atol=1e-6)
    np.testing.assert_allclose(trained.layers[0].bias, reference.layers[0].bias, rtol=0, atol=1e-6)
    assert loss == pytest.approx(last.metrics[Metric.MSE], rel=1e-6)


# 3. HELLO by broadcast, on loopback only --------------------------------------------------------------


def _private_netns() -> bool:
    with open("/proc/net/dev") as f:
        names = [line.split(":")[0].strip() for line in f.readlines()[2:]]
    return names == ["lo"]


@pytest.mark.skipif(not _private_netns(), reason="binds 0.0.0.0: only inside tools/ros_sandbox.sh (lo only)")
def test_hello_by_broadcast_learns_the_worker_address():
    from libredgetpu_ros.teamtensor import WorkerCore, serve

    async def run() -> tuple[tuple, bool]:
        stop = asyncio.Event()
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        server = asyncio.ensure_future(serve(WorkerCore(), "0.0.0.0", 0, stop, ready.set_result))
        port = (await ready)[1]
        try:
            async with DataSource(("127.255.255.255", port), broadcast=True) as src:
                sock = src._transport.get_extra_info("socket")
                allowed = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST))
                await src.hello(timeout=5.0)
                assert await src.managers_available() == 4  # unicast to the learnt address from now on
                return src.worker, allowed
        finally:
            stop.set()
            await server

    worker, allowed = asyncio.run(run())
    assert allowed and worker[0] == "127.0.0.1"


@pytest.mark.parametrize("wire", [WireFormat(), WireFormat(framing="seed")], ids=["reliable", "seed"])
def test_a_full_queue_is_waited_out_then_times_out_naming_the_worker(wire: WireFormat) -> None:
    """``send_batch`` against a worker whose queue is full: it polls the queue (both framings; reliable also
    after a QUEUE_FULL refusal, counted), sends when there is room, and gives up after ``deadline``."""
    from libredgetpu_ros.errors import DeviceTimeoutError
    from libredgetpu_ros.teamtensor import packets

    src = DataSource(("127.0.0.1", 9), wire)  # never opened: the worker's side is stubbed below
    probes: list[bool] = []
    sent: list[object] = []
    room = [False, False, True]  # then full for good
    stuck: list[bool] = []

    async def queue_has_space() -> bool:
        probes.append(room.pop(0) if room else False)
        return probes[-1]

    async def request(req: object, **_timing: float) -> None:
        sent.append(req)
        if (len(sent) == 1 and not wire.seed) or stuck:
            raise packets.Refused("BATCH", packets.Refusal.QUEUE_FULL)

    src.queue_has_space, src.request = queue_has_space, request  # type: ignore
    batch = (np.zeros((1, 2), np.float32), np.zeros((1, 1), np.float32))
    asyncio.run(src.send_batch(*batch, poll=0.001, deadline=5.0))
    assert probes == [False, False, True] and len(sent) == (1 if wire.seed else 2)
    assert src.stats.queue_full == (0 if wire.seed else 1)
    stuck.append(True)
    full = r"worker \('127\.0\.0\.1', 9\) queue stayed full for 0\.05 s"
    with pytest.raises(DeviceTimeoutError, match=full):
        asyncio.run(src.send_batch(*batch, poll=0.001, deadline=0.05))


# 4. Issue 30, failure 10: no silence, and nobody but the owner gets more bytes than it sent ---------------
# Before: a seed-only Linear (no bias) and a BATCH of one tensor per sample were dropped unanswered
# ("malformed"; a seed-built peer retries forever) and M_FULL answered anyone 3 bytes for 1.

NACK_MALFORMED, NACK_NO_TARGETS = bytes([NACK, 0x0C]), bytes([NACK, 0x0E])


def _seed_socket(worker):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5.0)
    s.bind(("127.0.0.1", 0))

    def ask(packet: bytes) -> bytes:
        s.sendto(packet, worker.address)
        reply, addr = s.recvfrom(65535)
        assert addr[:2] == worker.address
        return reply

    return s, ask


def _asn_md(desc: bytes, pipeline: int = 7, model: int = 1) -> bytes:
    return struct.pack(">BHHII", ASN_MD, pipeline, model, len(desc), 1) + desc + struct.pack(">BB", 1, MSE)


def test_seed_packets_the_worker_cannot_take_get_a_nack_with_a_reason():
    w0, _b0, batches = _problem(1)
    zero = np.zeros(2, np.float32)
    with training.worker_process("--framing", "seed") as worker:
        s, ask = _seed_socket(worker)
        try:
            assert ask(struct.pack(">BH", ASN_DP, 7)) == struct.pack(">BH", ACK, 7)
            seed_linear = struct.pack(">BB", 1, LINEAR) + tensor(w0) + struct.pack(">BB", 1, MSE)  # no bias
            assert ask(_asn_md(seed_linear)) == struct.pack(">BH", ACK, 1)
            w = w0
            for x, t in batches:
                assert ask(bytes([B_FULL])) == bytes([ACK])
                samples = b"".join(tensor(xi) + tensor(ti) for xi, ti in zip(x, t, strict=True))
                s.sendto(struct.pack(">BH", BATCH, len(x)) + samples, worker.address)  # taken: no reply
                w, _, _ = sgd(w, zero, x, t)  # the seed's Linear: y = W·x, the bias stays zero
            reply = ask(struct.pack(">BH", GET_MD, 1))
            assert reply[:3] == bytes([ACK, 1, LINEAR])
            got_w, pos = read_tensor(reply, 3)
            assert reply[pos:] == struct.pack(">BB", 1, MSE)  # weights only, as it was assigned
            np.testing.assert_allclose(got_w, w, rtol=0, atol=1e-6)
            x, _ = batches[0]
            singles = struct.pack(">BH", BATCH, len(x)) + b"".join(tensor(xi) for xi in x)  # the seed's text
            assert ask(singles) == NACK_NO_TARGETS
            assert ask(_asn_md(seed_linear)[:-3]) == NACK_MALFORMED  # truncated
            assert ask(struct.pack(">BH", 0x7F, 1)) == NACK_MALFORMED  # no such opcode
            assert ask(bytes([0x7F])) == bytes([NACK])  # a NACK is never longer than its packet
            assert ask(struct.pack(">BH", GET_MD, 9)) == bytes([NACK, 5])  # a refusal names its reason
        finally:
            s.close()
    assert worker.stats["rejected"] == {"malformed 0x05": 1, "malformed 0x08": 1, "malformed 0x7f": 2}
    assert worker.stats["executed"]["Batch"] == 3


def test_seed_replies_to_others_than_the_owner_are_never_longer_than_their_request():
    w0, b0, batches = _problem(2)
    x, t = batches[0]
    pairs = struct.pack(">BH", BATCH, len(x)) + b"".join(
        tensor(xi) + tensor(ti) for xi, ti in zip(x, t, strict=True))
    requests = [bytes([HELLO]), bytes([M_FULL]), bytes([B_FULL]), struct.pack(">BB", GET_MT, MSE),
                struct.pack(">BH", GET_MD, 1), struct.pack(">BH", ASN_DP, 8), _asn_md(descriptor(w0, b0)),
                pairs, bytes([0x7F]), bytes([ASN_MD]), struct.pack(">BH", 0x7F, 1)]
    with training.worker_process("--framing", "seed") as worker:
        owner, ask_owner = _seed_socket(worker)
        stranger, ask_stranger = _seed_socket(worker)
        try:
            for packet in requests:  # nobody holds the worker yet (ASN_DP would claim it: left out here)
                if packet[0] != ASN_DP:
                    assert 0 < len(ask_stranger(packet)) <= len(packet), packet[:3]
            assert ask_owner(struct.pack(">BH", ASN_DP, 7)) == struct.pack(">BH", ACK, 7)
            assert ask_owner(_asn_md(descriptor(w0, b0))) == struct.pack(">BH", ACK, 1)
            assert ask_owner(bytes([M_FULL])) == struct.pack(">BH", ACK, 3)  # the owner gets the count
            for packet in requests:
                reply = ask_stranger(packet)
                assert 0 < len(reply) <= len(packet), (packet[:3], reply)
            assert ask_owner(struct.pack(">BH", GET_MD, 1))[:3] == bytes([ACK, 1, LINEAR])  # still its own
        finally:
            owner.close()
            stranger.close()
