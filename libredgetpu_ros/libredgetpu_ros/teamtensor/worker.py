"""The board side in software: model managers, one bounded batch queue, NumPy training, on UDP.

:class:`WorkerCore` is the protocol state machine with no sockets (``handle(peer, datagram)`` returns the
datagrams to send back), so tests and fuzzers drive it directly; :func:`serve` puts it on an asyncio
datagram endpoint and trains queued batches between datagrams.

Reliable framing (default): a datagram's integrity tag is checked before anything else; then the worker's
one session (``sessions.py``) decides: the owner's requests run exactly once (stored replies for repeats,
stale ids dropped), a peer without the session may only say HELLO, probe (M_FULL, B_FULL) or claim the
worker with ASN_DP when nobody holds it (or its holder released it or went silent for
``session_timeout``; with a shared key only with a fresh worker-issued nonce as its session number, NACK
CHALLENGE carrying one otherwise: a replayed claim cannot take the worker); anything else gets NACK BUSY
(or NO_PIPELINE when nobody holds the worker). Replies to peers without the session are at most 6 bytes of
packet (3 but for a challenge), never larger than twice their request: the worker cannot be used to reflect
traffic. Fragments are reassembled for the owner only.

Seed framing: the seed's bytes, best effort: every valid request is executed when it arrives (no ids, so a
network duplicate of a BATCH trains twice), an accepted BATCH gets no reply, anything refused or
undecodable a NACK with its reason (cut to the request's length for others than the owner).

Budget: a model is accepted only if training one sample of the largest input its descriptor admits fits
``memory_budget`` (every layer's output from the descriptor, ``nn.training_bytes``); a batch only if its
training fits it; otherwise NACK BAD_MODEL / OVER_BUDGET. Nothing a datagram does can end the worker: an
exception while handling one is caught, logged and counted (``internal error``), the datagram dropped.
Reads (GET_MT, GET_MD) first train what is queued, so they see every batch acknowledged before them.

Every datagram that is not acted on (integrity, too short, unknown opcode, bad field, bad fragment, stale
id, fragment without the session) is counted in ``stats.rejected`` by reason, leaves the state as it was and
gets no reply.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor import datagrams, nn
from libredgetpu_ros.teamtensor.model import ModelSpec
from libredgetpu_ros.teamtensor.packets import (
    STATE_CHANGING,
    AssignModel,
    AssignPipeline,
    Batch,
    GetMetric,
    GetModel,
    Hello,
    MissingTargets,
    ProbeManagers,
    ProbeQueue,
    Release,
    Request,
    ack,
    ack_metric,
    ack_model,
    ack_u16,
    decode_request,
    nack,
    nack_challenge,
)
from libredgetpu_ros.teamtensor.sessions import Challenges, Session
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, Metric, Op, Refusal, WireFormat

log = logging.getLogger(__name__)
RECV_BUFFER = 4 * 1024 * 1024  # a fragment burst of a large batch must not overflow the socket buffer
MiB = 1024 * 1024


@dataclass(frozen=True)
class WorkerConfig:
    managers: int = 4  # model managers on this board
    queue_capacity: int = 8  # batches the data pipeline router holds (B_FULL answers from this)
    learning_rate: float = 0.05  # SGD step (the seed carries none on the wire: a property of the board)
    session_timeout: float = 10.0  # s of silence after which another Data Source may claim the worker
    reply_cache: int = 64  # replies of state-changing requests stored for repeats (the session's)
    reply_budget: int = 64 * 1024  # bytes those stored replies may take
    id_window: int = 1 << 16  # how far ahead of the latest executed id a new request id may be
    memory_budget: int = 128 * MiB  # bytes training one batch may allocate (model and batch checked)
    max_pending: int = 2  # fragmented packets of the owner reassembled at once
    challenge_ttl: float = 10.0  # s a claim nonce (HMAC mode) stays good

    def memory_bound(self, wire: WireFormat = DEFAULT_WIRE) -> int:
        """Upper bound of the worker's protocol and training memory (docs/teamtensor.md, *Memory*): models,
        the batch queue, reassembly, stored replies and one training step. Peers without the session add
        nothing."""
        widen = max(1, 4 // wire.values.itemsize)  # weights are decoded to float32
        models = self.managers * wire.max_packet * widen
        queue = self.queue_capacity * wire.max_packet
        reassembly = (self.max_pending + 1) * wire.max_packet
        return models + queue + reassembly + self.reply_budget + self.memory_budget


@dataclass
class ModelManager:
    model_id: int
    pipeline: int
    model: ModelSpec
    last: dict[Metric, float] = field(default_factory=dict)  # metrics of the most recent batch
    batches: int = 0
    samples: int = 0


@dataclass
class WorkerStats(datagrams.RejectedDatagrams):
    received: int = 0
    executed: Counter = field(default_factory=Counter)  # by request type
    refused: Counter = field(default_factory=Counter)  # NACKs sent, by reason
    duplicates: int = 0  # answered from the stored replies
    batch_errors: int = 0  # queued batches a model could not process (logged)
    diverged: int = 0  # training steps not applied because they made a weight non-finite
    sessions: Counter = field(default_factory=Counter)  # claimed, taken over, released

    def as_dict(self) -> dict:
        return {"received": self.received, "executed": dict(self.executed), "refused": dict(self.refused),
                "duplicates": self.duplicates, "rejected": dict(self.rejected),
                "rejected_total": self.rejected_total, "batch_errors": self.batch_errors,
                "diverged": self.diverged, "sessions": dict(self.sessions)}


class WorkerCore:
    def __init__(self, config: WorkerConfig = WorkerConfig(), wire: WireFormat = DEFAULT_WIRE,
                 key: bytes | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self.wire, self.clock = config, wire, clock
        self.framer = datagrams.Framer(wire, key)
        self.pipeline: int | None = None
        self.managers: dict[int, ModelManager] = {}
        self.queue: deque[Batch] = deque()
        self.stats = WorkerStats()
        self.session: Session | None = None
        self._challenges = Challenges(config.challenge_ttl)
        self._reassembler = datagrams.Reassembler(wire, max_pending=config.max_pending)

    # ----- datagrams --------------------------------------------------------------------------------

    def handle(self, peer: Hashable, datagram: bytes) -> list[bytes]:
        """Process one datagram from ``peer``; return the datagrams to send back to it. Never raises."""
        self.stats.received += 1
        try:
            return self._handle(peer, datagram)
        except Exception as exc:  # a bug or an allocation failure: this datagram is lost, not the worker
            self.stats.rejected["internal error"] += 1
            log.error("datagram from %s not handled: %s: %s", peer, type(exc).__name__, exc, exc_info=True)
            return []

    def _handle(self, peer: Hashable, datagram: bytes) -> list[bytes]:
        try:
            sealed = self.framer.open(datagram)
        except datagrams.IntegrityError:
            self.stats.rejected["integrity"] += 1
            return []
        except ProtocolError:
            self.stats.rejected["truncated"] += 1
            return []
        if self.wire.seed:
            return self._handle_seed(peer, sealed.body)
        session, rid, body = self.session, sealed.rid, sealed.body
        owner = session is not None and session.owns(peer, sealed.session)
        fragment = self._reassembler.is_fragment(body)
        if owner:
            if session.is_new(rid, self.config.id_window):  # replays of old ids do not keep a session alive
                session.last_seen = self.clock()
            stored = session.replies.get(rid)
            if stored is not None:
                if fragment and int.from_bytes(body[5:9], "big") != 0:
                    return []  # answer a retransmitted fragmented request once, at its first fragment
                self.stats.duplicates += 1
                return stored
            if rid != session.highest and not session.is_new(rid, self.config.id_window):
                self.stats.rejected["stale request id"] += 1
                return []
        elif fragment:  # no session, no reassembly memory: a Data Source claims with a small ASN_DP first
            self.stats.rejected["fragment without the session"] += 1
            return []
        try:
            packet = self._reassembler.feed((sealed.session, rid), body) if fragment else body
            if packet is None:
                return []  # more fragments to come
            req = decode_request(packet, self.wire)
        except ProtocolError as exc:
            self.stats.rejected["fragment" if fragment else _reason(body)] += 1
            log.debug("rejected datagram from %s: %s", peer, exc)
            return []
        if not owner:
            reply = self._without_session(peer, sealed.session, rid, req)
            return self.framer.seal(reply, sealed.session, rid)
        if rid == session.highest and isinstance(req, STATE_CHANGING):
            self.stats.rejected["stale request id"] += 1  # its stored reply was evicted: never run it twice
            return []
        reply = self.framer.seal(self.execute(req), sealed.session, rid)
        session.highest = rid  # only once executed: a request that raised may be retried
        if isinstance(req, Release):
            self.session = None
            self.stats.sessions["released"] += 1
        elif isinstance(req, STATE_CHANGING) and self.session is session:
            session.store(rid, reply, self.config.reply_cache, self.config.reply_budget)
        return reply

    def _without_session(self, peer: Hashable, number: int, rid: int, req: Request) -> bytes:
        """The reply to a peer that does not hold the session: a few bytes, and only ASN_DP changes state."""
        holder = self.session
        if isinstance(req, Hello | ProbeManagers | ProbeQueue):
            return self.execute(req)
        if holder is None and isinstance(req, Release):
            return ack()  # nothing to release (a repeat of an accepted RELEASE lands here)
        if isinstance(req, AssignPipeline):
            silent = holder is not None and self.clock() - holder.last_seen > self.config.session_timeout
            if holder is None or silent:
                now = self.clock()
                if self.framer.key is not None and not self._challenges.redeem(number, peer, now):
                    # A keyed claim must be fresh: a replay of an earlier session's ASN_DP never is.
                    self.stats.refused[Refusal.CHALLENGE.name] += 1
                    avoid = 0 if holder is None else holder.number
                    return nack_challenge(self._challenges.issue(peer, now, avoid))
                reply = self.execute(req)  # first: if it raised, nobody would hold the worker
                self.stats.sessions["taken over" if silent else "claimed"] += 1
                if silent:
                    log.warning("session of %s silent for %.1f s: taken over by %s", holder.peer,
                                self.clock() - holder.last_seen, peer)
                self.session = Session(peer, number, rid, self.clock())
                self.session.store(rid, self.framer.seal(reply, number, rid), self.config.reply_cache,
                                   self.config.reply_budget)
                return reply
        return self._nack(Refusal.BUSY if holder is not None else Refusal.NO_PIPELINE)

    def _handle_seed(self, peer: Hashable, body: memoryview) -> list[bytes]:
        """The seed framing: the address that claimed the worker with ASN_DP owns it (no session number).

        Nothing is answered with silence but an accepted BATCH (the seed gives it no reply) and an empty
        datagram: a packet that cannot be decoded gets NACK MALFORMED (NO_TARGETS for a BATCH of one tensor
        per sample). No reply is longer than the packet it answers unless it goes to the owner: a 1-byte
        request of anyone else gets at most 1 byte (M_FULL's count needs 3: it is answered with the bare
        NACK, "claim the worker first"), so a spoofed address gains nothing by reflection."""
        if not len(body):
            self.stats.rejected["empty"] += 1
            return []
        session = self.session
        owner = session is not None and session.peer == peer
        try:
            req = decode_request(body, self.wire)
        except ProtocolError as exc:
            self.stats.rejected[_reason(body)] += 1
            log.debug("refused datagram from %s: %s", peer, exc)
            reason = Refusal.NO_TARGETS if isinstance(exc, MissingTargets) else Refusal.MALFORMED
            return [self._nack(reason)[:len(body)]]
        if owner:
            session.last_seen = self.clock()
            reply = self.execute(req)
        else:
            reply = self._without_session(peer, 0, 0, req)
        if isinstance(req, Batch) and reply[0] == Op.ACK:
            return []  # the seed's BATCH has no reply when taken (B_FULL is how a source knows there is room)
        if not owner and len(reply) > len(body):
            reply = reply[:1] if reply[0] == Op.NACK else bytes([Op.NACK])
        return [reply]

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
            if len(self.queue) < self.config.queue_capacity:
                return ack()
            if self.wire.seed:  # the seed's B_FULL answer "no room" is the bare NACK
                self.stats.refused[Refusal.QUEUE_FULL.name] += 1
                return bytes([Op.NACK])
            return self._nack(Refusal.QUEUE_FULL)
        if isinstance(req, AssignModel):
            return self._assign_model(req)
        if isinstance(req, Batch):
            return self._enqueue(req)
        if isinstance(req, Release):
            return ack()
        if isinstance(req, GetMetric | GetModel):
            model_id = req.model_id if req.model_id is not None else min(self.managers, default=None)
            manager = self.managers.get(model_id)
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
        shape = nn.largest_input(req.model)
        if shape is not None:  # every layer's output from the descriptor, and one sample's training cost
            try:
                cost = nn.training_bytes(req.model, shape, 1, self.wire.maxpool_window)
            except ProtocolError as exc:
                log.info("model %d refused: %s", req.model_id, exc)
                return self._nack(Refusal.BAD_MODEL)
            if cost > self.config.memory_budget:
                log.info("model %d refused: one sample of %s needs %d bytes to train, budget %d",
                         req.model_id, shape, cost, self.config.memory_budget)
                return self._nack(Refusal.BAD_MODEL)
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
            cost = nn.training_bytes(manager.model, req.inputs.shape[1:], len(req.inputs),
                                     self.wire.maxpool_window)
            if cost > self.config.memory_budget:
                log.info("batch refused for model %d: training needs %d bytes, budget %d", manager.model_id,
                         cost, self.config.memory_budget)
                return self._nack(Refusal.OVER_BUDGET)
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
            except FloatingPointError as exc:  # the model diverged on this batch: weights kept as they were
                self.stats.diverged += 1
                log.warning("model %d: %s", manager.model_id, exc)
                continue
            except Exception as exc:  # MemoryError too: this batch is lost for this model, not the worker
                self.stats.batch_errors += 1
                log.error("model %d could not process a batch: %s: %s", manager.model_id,
                          type(exc).__name__, exc)
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
