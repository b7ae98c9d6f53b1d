"""The Data Source side: an asyncio client for one worker board.

One request is outstanding at a time (stop-and-wait, per worker). Reliable framing (default): the Data
Source picks a random session number when it opens; each request gets the next request id of that session;
its datagrams are retransmitted on a timeout that grows by ``backoff`` up to ``max_timeout``, at most
``retries`` times, then :class:`DeviceTimeoutError`. A datagram that is not the reply to the outstanding
request (integrity tag wrong, another sender, session or id, malformed, a fragment that does not fit) is
counted in ``stats.rejected`` and ignored, so corrupted, duplicated, reordered or forged datagrams cannot
complete the wrong request. Leaving ``async with`` releases the worker's session (RELEASE). HELLO follows
the seed: retransmitted every 50 ms until a worker answers; with ``broadcast=True`` it may go to a
broadcast address and the first worker that answers becomes this source's worker.

Seed framing: the seed's bytes and nothing else. The first reply-shaped datagram from the worker answers
the outstanding request (there are no ids: best effort); a BATCH, which has no reply in the seed when it is
taken, is sent once after B_FULL says there is room, and a NACK within ``timeout`` refuses it.

A batch refused with QUEUE_FULL is retried with a new id after the worker's B_FULL says there is space
again (:meth:`DataSource.send_batch`).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import socket
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.errors import DeviceTimeoutError, ProtocolError
from libredgetpu_ros.teamtensor import datagrams, packets
from libredgetpu_ros.teamtensor.model import ModelSpec
from libredgetpu_ros.teamtensor.packets import Refused, Request, decode_reply, encode_request
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, Metric, Refusal, WireFormat

log = logging.getLogger(__name__)
HELLO_PERIOD = 0.050  # the seed: rebroadcast after 50 ms without an answer
CLAIM_ATTEMPTS = 4  # claims answered by a fresh challenge (HMAC mode) before giving up


@dataclass
class SourceStats(datagrams.RejectedDatagrams):  # rejected: received datagrams not taken as a reply
    requests: int = 0
    datagrams_sent: int = 0
    retransmissions: int = 0
    replies: int = 0
    queue_full: int = 0  # batches the worker refused for lack of queue space (then resent)


@dataclass
class _Pending:
    rid: int
    request: Request
    future: asyncio.Future


class _SourceProtocol(asyncio.DatagramProtocol):
    def __init__(self, source: DataSource) -> None:
        self.source = source

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.source._on_datagram(data, addr)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable: the retransmission timer copes
        self.source.stats.rejected["socket error"] += 1


class DataSource:
    """Client of one worker at ``worker`` = (host, port). Use ``async with DataSource(...) as src``.

    ``key``: shared key of the worker (HMAC tags instead of CRC-32; reliable framing only). ``broadcast``:
    the socket may send to a broadcast address (SO_BROADCAST) and HELLO learns the worker's address from
    its answer. ``release_timeout``: how long leaving ``async with`` tries to release the session.
    """

    def __init__(self, worker: tuple[str, int], wire: WireFormat = DEFAULT_WIRE, *, timeout: float = 0.1,
                 backoff: float = 1.5, max_timeout: float = 1.0, retries: int = 60,
                 local: tuple[str, int] = ("127.0.0.1", 0), key: bytes | None = None,
                 broadcast: bool = False, release_timeout: float = 2.0) -> None:
        self.worker = (socket.gethostbyname(worker[0]), int(worker[1]))
        self.wire = wire
        self.timeout, self.backoff, self.max_timeout, self.retries = timeout, backoff, max_timeout, retries
        self.local = local
        self.broadcast, self.release_timeout = broadcast, release_timeout
        self.framer = datagrams.Framer(wire, key)
        self.stats = SourceStats()
        # The session number scopes request ids: a restarted source (same address) is never taken for the
        # old one, and a datagram of the old one never for this one's.
        self.session = random.SystemRandom().randrange(1, 1 << 32)
        self._ids = itertools.count(1)
        self._claimed = False  # the worker acknowledged our ASN_DP: release it when leaving
        self._lock = asyncio.Lock()
        self._pending: _Pending | None = None
        self._reassembler = datagrams.Reassembler(wire, max_pending=2)
        self._transport: asyncio.DatagramTransport | None = None

    async def __aenter__(self) -> DataSource:
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.release()
        finally:
            self.close()

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _SourceProtocol(self),
                                                                 local_addr=self.local)
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
            if self.broadcast:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)

    @property
    def address(self) -> tuple[str, int]:
        return self._transport.get_extra_info("sockname")[:2]

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # ----- receive path -----------------------------------------------------------------------------

    def _on_datagram(self, data: bytes, addr: tuple) -> None:
        rejected = self.stats.rejected
        pending = self._pending
        sender = tuple(addr[:2])
        discovering = self.broadcast and pending is not None and isinstance(pending.request, packets.Hello)
        if sender != self.worker and not discovering:
            rejected["foreign sender"] += 1
            return
        try:
            sealed = self.framer.open(data)
        except datagrams.IntegrityError:
            rejected["integrity"] += 1
            return
        except ProtocolError:
            rejected["truncated"] += 1
            return
        rid, body = sealed.rid, sealed.body
        if not self.wire.seed and sealed.session != self.session:
            rejected["other session"] += 1
            return
        if pending is None or rid != pending.rid or pending.future.done():
            rejected["not the awaited request id"] += 1
            return
        try:
            if self._reassembler.is_fragment(body):
                packet = self._reassembler.feed(rid, body)
                if packet is None:
                    return
            else:
                packet = body
            value = decode_reply(pending.request, packet, self.wire)
        except Refused as exc:
            self.stats.replies += 1
            pending.future.set_exception(exc)
            return
        except ProtocolError as exc:
            rejected["malformed reply"] += 1
            log.debug("rejected reply from %s: %s", addr, exc)
            return
        self.stats.replies += 1
        if discovering:
            self.worker = sender
        pending.future.set_result(value)

    # ----- requests ---------------------------------------------------------------------------------

    async def request(self, req: Request, *, period: float | None = None,
                      deadline: float | None = None) -> Any:
        """Send ``req`` and return what the ACK carries; retransmit until answered (see the module doc).

        ``period`` fixes the retransmission interval (no backoff, no retry limit: HELLO); ``deadline`` bounds
        the whole call in seconds.
        """
        if self._transport is None:
            raise ProtocolError("DataSource is not open")
        packet = encode_request(req, self.wire)
        async with self._lock:
            rid = 0 if self.wire.seed else next(self._ids) & 0xFFFFFFFF
            loop = asyncio.get_running_loop()
            pending = _Pending(rid, req, loop.create_future())
            self._pending = pending
            out = self.framer.seal(packet, self.session, rid)
            self.stats.requests += 1
            timeout = period or self.timeout
            end = None if deadline is None else loop.time() + deadline
            try:
                for attempt in itertools.count():
                    if attempt:
                        self.stats.retransmissions += 1
                    for d in out:
                        self._transport.sendto(d, self.worker)
                    self.stats.datagrams_sent += len(out)
                    wait = timeout if end is None else min(timeout, max(0.0, end - loop.time()))
                    try:
                        return await asyncio.wait_for(asyncio.shield(pending.future), wait)
                    except asyncio.TimeoutError:  # not TimeoutError before Python 3.11 (Humble's 3.10)
                        pass
                    if end is not None and loop.time() >= end:
                        break
                    if period is None:
                        if attempt >= self.retries:
                            break
                        timeout = min(timeout * self.backoff, self.max_timeout)
                raise DeviceTimeoutError(f"worker {self.worker[0]}:{self.worker[1]} did not answer "
                                         f"{type(req).__name__} (request id {rid}) after {attempt + 1} tries")
            finally:
                self._pending = None
                self._reassembler.discard(rid)

    async def hello(self, timeout: float | None = None) -> None:
        """The seed's HELLO: resend every 50 ms until the worker ACKs (forever if ``timeout`` is None)."""
        await self.request(packets.Hello(), period=HELLO_PERIOD, deadline=timeout)

    async def assign_pipeline(self, pipeline: int) -> None:
        """Claim the worker's session (reliable framing) and assign the pipeline; NACK BUSY (``Refused``)
        while another Data Source holds the worker. A keyed worker answers a claim with NACK CHALLENGE and a
        nonce first: the claim is sent again with the nonce as this source's session number."""
        for _ in range(CLAIM_ATTEMPTS):
            try:
                await self.request(packets.AssignPipeline(pipeline))
            except Refused as exc:
                if exc.reason != Refusal.CHALLENGE or exc.nonce is None:
                    raise
                self.session = exc.nonce  # worker-chosen: a replay of this claim is never fresh again
                continue
            self._claimed = True
            return
        raise ProtocolError(f"worker {self.worker[0]}:{self.worker[1]} answered {CLAIM_ATTEMPTS} claims "
                            "with a new challenge each (its nonces expire or are flooded out)")

    async def release(self) -> None:
        """End our session on the worker so another Data Source may claim it (reliable framing; a no-op
        otherwise). Best effort within ``release_timeout``: a worker that does not answer frees the session
        after its own silence timeout anyway."""
        if not self._claimed or self.wire.seed or self._transport is None:
            return
        self._claimed = False
        try:
            await self.request(packets.Release(), deadline=self.release_timeout)
        except (DeviceTimeoutError, ProtocolError) as exc:
            log.info("session not released: %s", exc)

    async def assign_model(self, pipeline: int, model_id: int, model: ModelSpec) -> int:
        """Upload a model with its initial weights; returns the worker's count of models in the pipeline."""
        return await self.request(packets.AssignModel(pipeline, model_id, model))

    async def managers_available(self) -> int:
        return await self.request(packets.ProbeManagers())

    async def queue_has_space(self) -> bool:
        return await self.request(packets.ProbeQueue())

    async def send_batch(self, inputs: np.ndarray, targets: np.ndarray, *, evaluate: bool = False,
                         poll: float = 0.002, deadline: float = 60.0) -> None:
        """Queue one batch (split into fragments when large); waits while the worker's queue is full."""
        end = asyncio.get_running_loop().time() + deadline
        batch = packets.Batch(np.asarray(inputs), np.asarray(targets), evaluate)
        while True:
            if self.wire.seed:  # wait for room, send once; the seed answers a taken BATCH with nothing
                await self._wait_for_room(end, poll, deadline)
            try:
                if self.wire.seed:
                    await self._seed_batch(batch)
                else:
                    await self.request(batch)
                return
            except Refused as exc:
                if exc.reason != Refusal.QUEUE_FULL:
                    raise
                self.stats.queue_full += 1
            await self._wait_for_room(end, poll, deadline)

    async def _seed_batch(self, batch: packets.Batch) -> None:
        """Seed framing: send ``batch`` once; a NACK within ``timeout`` is a refusal (``Refused``), silence
        means it was taken. A NACK later than that may be taken for the next request's answer (best effort:
        the seed has no ids)."""
        try:
            await self.request(batch, deadline=self.timeout)
        except DeviceTimeoutError:
            return

    async def _wait_for_room(self, end: float, poll: float, deadline: float) -> None:
        """Poll the worker's queue every ``poll`` s until it has room; past ``end`` (loop time), time out."""
        loop = asyncio.get_running_loop()
        while not await self.queue_has_space():
            if loop.time() > end:
                raise DeviceTimeoutError(f"worker {self.worker} queue stayed full for {deadline} s")
            await asyncio.sleep(poll)

    async def metric(self, model_id: int, metric: Metric | int) -> float:
        """A metric of ``model_id`` (the seed framing's GET_MT names no model: the worker's lowest id)."""
        return await self.request(packets.GetMetric(model_id, int(metric)))

    async def get_model(self, model_id: int) -> ModelSpec:
        return await self.request(packets.GetModel(model_id))
