"""The board side in software: model managers, one bounded batch queue, NumPy training, on UDP.

:class:`WorkerCore` is the protocol state machine with no sockets (``handle(peer, datagram)`` returns the
datagrams to send back), so tests and fuzzers drive it directly; :func:`serve` puts it on an asyncio
datagram endpoint and trains queued batches between datagrams.

Exactly-once: each peer's last ``reply_cache`` replies are kept by request id. A duplicate (retransmission
or network duplicate) gets the cached reply and is not executed again; an id older than everything cached
is stale and dropped, so a datagram delayed past its retransmissions cannot replay a BATCH or an ASN_MD.
Reads (GET_MT, GET_MD) first train what is queued, so they see every batch acknowledged before them.

Every datagram that is not acted on (too short, unknown opcode, bad field, bad fragment, stale id) is
counted in ``stats.rejected`` by reason and leaves the state as it was; no reply is sent to it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor import datagrams, nn
from libredgetpu_ros.teamtensor.model import ModelSpec
from libredgetpu_ros.teamtensor.packets import (
    AssignModel,
    AssignPipeline,
    Batch,
    GetMetric,
    GetModel,
    Hello,
    ProbeManagers,
    ProbeQueue,
    Request,
    ack,
    ack_metric,
    ack_model,
    ack_u16,
    decode_request,
    nack,
)
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, Metric, Refusal, WireFormat

log = logging.getLogger(__name__)
RECV_BUFFER = 4 * 1024 * 1024  # a fragment burst of a large batch must not overflow the socket buffer


@dataclass(frozen=True)
class WorkerConfig:
    managers: int = 4  # model managers on this board
    queue_capacity: int = 8  # batches the data pipeline router holds (B_FULL answers from this)
    learning_rate: float = 0.05  # SGD step (the seed carries none on the wire: a property of the board)
    reply_cache: int = 64  # replies kept per peer for duplicates
    max_peers: int = 32  # peers whose reply caches are kept (least recently seen dropped)


@dataclass
class ModelManager:
    model_id: int
    pipeline: int
    model: ModelSpec
    last: dict[Metric, float] = field(default_factory=dict)  # metrics of the most recent batch
    batches: int = 0
    samples: int = 0


@dataclass
class _Session:
    replies: OrderedDict[int, list[bytes]] = field(default_factory=OrderedDict)
    floor: int = 0  # ids below this are stale (their replies were evicted)


@dataclass
class WorkerStats(datagrams.RejectedDatagrams):
    received: int = 0
    executed: Counter = field(default_factory=Counter)  # by request type
    refused: Counter = field(default_factory=Counter)  # NACKs sent, by reason
    duplicates: int = 0  # answered from the reply cache
    batch_errors: int = 0  # queued batches a model could not process (logged)

    def as_dict(self) -> dict:
        return {"received": self.received, "executed": dict(self.executed), "refused": dict(self.refused),
                "duplicates": self.duplicates, "rejected": dict(self.rejected),
                "rejected_total": self.rejected_total, "batch_errors": self.batch_errors}


class WorkerCore:
    def __init__(self, config: WorkerConfig = WorkerConfig(), wire: WireFormat = DEFAULT_WIRE) -> None:
        self.config, self.wire = config, wire
        self.pipeline: int | None = None
        self.managers: dict[int, ModelManager] = {}
        self.queue: deque[Batch] = deque()
        self.stats = WorkerStats()
        self._sessions: OrderedDict[Hashable, _Session] = OrderedDict()
        self._reassembler = datagrams.Reassembler(wire)

    # ----- datagrams --------------------------------------------------------------------------------

    def handle(self, peer: Hashable, datagram: bytes) -> list[bytes]:
        """Process one datagram from ``peer``; return the datagrams to send back to it."""
        self.stats.received += 1
        try:
            rid, body = datagrams.split(datagram)
        except ProtocolError:
            self.stats.rejected["truncated"] += 1
            return []
        session = self._session(peer)
        cached = session.replies.get(rid)
        fragment = self._reassembler.is_fragment(body)
        if cached is not None:
            if fragment and int.from_bytes(body[5:9], "big") != 0:
                return []  # answer a retransmitted fragmented request once, at its first fragment
            self.stats.duplicates += 1
            return cached
        if rid < session.floor:
            self.stats.rejected["stale request id"] += 1
            return []
        try:
            packet = self._reassembler.feed((peer, rid), body) if fragment else body
            if packet is None:
                return []  # more fragments to come
            req = decode_request(packet, self.wire)
        except ProtocolError as exc:
            self.stats.rejected["fragment" if fragment else _reason(body)] += 1
            log.debug("rejected datagram from %s: %s", peer, exc)
            return []
        reply = datagrams.to_datagrams(self.execute(req), rid, self.wire)
        session.replies[rid] = reply
        while len(session.replies) > self.config.reply_cache:
            old, _ = session.replies.popitem(last=False)
            session.floor = max(session.floor, old + 1)
        return reply

    def _session(self, peer: Hashable) -> _Session:
        session = self._sessions.get(peer)
        if session is None:
            session = self._sessions[peer] = _Session()
            while len(self._sessions) > self.config.max_peers:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(peer)
        return session

    # ----- requests ---------------------------------------------------------------------------------

    def execute(self, req: Request) -> bytes:
        """The reply packet to a decoded request (state changes happen here only)."""
        self.stats.executed[type(req).__name__] += 1
        if isinstance(req, Hello):
            return ack()
        if isinstance(req, AssignPipeline):
            if req.pipeline != self.pipeline:  # a new pipeline: the old one's models and data go
                self.managers.clear()
                self.queue.clear()
                self.pipeline = req.pipeline
            return ack_u16(req.pipeline)
        if isinstance(req, ProbeManagers):
            return ack_u16(self.config.managers - len(self.managers))
        if isinstance(req, ProbeQueue):
            return ack() if len(self.queue) < self.config.queue_capacity else self._nack(Refusal.QUEUE_FULL)
        if isinstance(req, AssignModel):
            return self._assign_model(req)
        if isinstance(req, Batch):
            return self._enqueue(req)
        if isinstance(req, GetMetric | GetModel):
            manager = self.managers.get(req.model_id)
            if manager is None:
                return self._nack(Refusal.UNKNOWN_MODEL)
            self.drain()
            if isinstance(req, GetModel):
                return ack_model(manager.model, self.wire)
            if req.metric not in manager.model.metrics:
                return self._nack(Refusal.UNKNOWN_METRIC)
            if req.metric not in manager.last:
                return self._nack(Refusal.NO_DATA)
            return ack_metric(manager.last[Metric(req.metric)], self.wire)
        raise ProtocolError(f"no handler for {type(req).__name__}")

    def _nack(self, reason: Refusal) -> bytes:
        self.stats.refused[reason.name] += 1
        return nack(reason)

    def _assign_model(self, req: AssignModel) -> bytes:
        if self.pipeline is None:
            return self._nack(Refusal.NO_PIPELINE)
        if req.pipeline != self.pipeline:
            return self._nack(Refusal.WRONG_PIPELINE)
        if req.model_id not in self.managers and len(self.managers) >= self.config.managers:
            return self._nack(Refusal.NO_MANAGER)
        self.drain()  # queued batches belong to the models assigned when they were acknowledged
        self.managers[req.model_id] = ModelManager(req.model_id, req.pipeline, req.model.copy())
        return ack_u16(sum(m.pipeline == self.pipeline for m in self.managers.values()))

    def _enqueue(self, req: Batch) -> bytes:
        if self.pipeline is None:
            return self._nack(Refusal.NO_PIPELINE)
        if not self.managers:
            return self._nack(Refusal.UNKNOWN_MODEL)
        if len(self.queue) >= self.config.queue_capacity:
            return self._nack(Refusal.QUEUE_FULL)
        for manager in self.managers.values():
            try:
                out = nn.output_shape(manager.model, req.inputs.shape[1:], self.wire.maxpool_window)
            except ProtocolError as exc:
                log.info("batch refused for model %d: %s", manager.model_id, exc)
                return self._nack(Refusal.SHAPE_MISMATCH)
            if out != req.targets.shape[1:]:
                log.info("batch refused for model %d: targets %s, model output %s", manager.model_id,
                         req.targets.shape[1:], out)
                return self._nack(Refusal.SHAPE_MISMATCH)
        self.queue.append(req)
        return ack()

    # ----- training ---------------------------------------------------------------------------------

    def step(self) -> bool:
        """Train (or evaluate) every model manager on the oldest queued batch; False if none is queued."""
        if not self.queue:
            return False
        batch = self.queue.popleft()
        for manager in self.managers.values():
            try:
                if batch.evaluate:
                    result = nn.evaluate(manager.model, batch.inputs, batch.targets, self.wire.maxpool_window)
                else:
                    result = nn.train_step(manager.model, batch.inputs, batch.targets,
                                           self.config.learning_rate, self.wire.maxpool_window)
            except (ProtocolError, ValueError, FloatingPointError) as exc:
                self.stats.batch_errors += 1
                log.error("model %d could not process a batch: %s", manager.model_id, exc)
                continue
            manager.last = result.metrics
            manager.batches += 1
            manager.samples += result.samples
        return True

    def drain(self) -> None:
        while self.step():
            pass


def _reason(body: memoryview) -> str:
    return f"malformed {body[0]:#04x}" if len(body) else "empty"


# --------------------------------------------------------------------------------------------------
# On a socket.


class _WorkerProtocol(asyncio.DatagramProtocol):
    def __init__(self, core: WorkerCore, wake: asyncio.Event) -> None:
        self.core, self.wake = core, wake
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECV_BUFFER)

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        for out in self.core.handle(addr, data):
            self.transport.sendto(out, addr)
        if self.core.queue:
            self.wake.set()

    def error_received(self, exc: Exception) -> None:  # e.g. ICMP port unreachable from a gone peer
        self.core.stats.rejected["socket error"] += 1


async def serve(core: WorkerCore, host: str, port: int, stop: asyncio.Event,
                on_ready: Callable[[tuple[str, int]], None] | None = None) -> None:
    """Serve ``core`` on ``host:port`` until ``stop`` is set; queued batches train between datagrams."""
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    transport, _ = await loop.create_datagram_endpoint(lambda: _WorkerProtocol(core, wake),
                                                       local_addr=(host, port))
    try:
        if on_ready is not None:
            on_ready(transport.get_extra_info("sockname")[:2])
        stopper = asyncio.ensure_future(stop.wait())
        while not stop.is_set():
            waker = asyncio.ensure_future(wake.wait())
            await asyncio.wait({stopper, waker}, return_when=asyncio.FIRST_COMPLETED)
            waker.cancel()
            wake.clear()
            while core.step():  # one batch at a time: datagrams (B_FULL probes) are served in between
                await asyncio.sleep(0)
        stopper.cancel()
    finally:
        transport.close()


def weights_of(model: ModelSpec) -> list[np.ndarray]:
    """Copies of a model's parameters in wire order (for comparisons)."""
    return [p.copy() for p in model.parameters()]
