"""The Data Source side: an asyncio client for one worker board.

One request is outstanding at a time (stop-and-wait, per worker). Each request gets a fresh request id;
its datagrams are retransmitted on a timeout that grows by ``backoff`` up to ``max_timeout``, at most
``retries`` times, then :class:`DeviceTimeoutError`. A datagram that is not the reply to the outstanding
request (another sender, another id, malformed, a fragment that does not fit) is counted in
``stats.rejected`` and ignored, so duplicated, reordered or forged datagrams cannot complete the wrong
request. HELLO follows the seed: retransmitted every 50 ms until a worker answers.

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
    """Client of one worker at ``worker`` = (host, port). Use ``async with DataSource(...) as src``."""

    def __init__(self, worker: tuple[str, int], wire: WireFormat = DEFAULT_WIRE, *, timeout: float = 0.1,
                 backoff: float = 1.5, max_timeout: float = 1.0, retries: int = 60,
                 local: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.worker = (socket.gethostbyname(worker[0]), int(worker[1]))
        self.wire = wire
        self.timeout, self.backoff, self.max_timeout, self.retries = timeout, backoff, max_timeout, retries
        self.local = local
        self.stats = SourceStats()
        # Ids start at a random point so a restarted source on the same port is not mistaken for an old one.
        self._ids = itertools.count(random.SystemRandom().randrange(1, 1 << 30))
        self._lock = asyncio.Lock()
        self._pending: _Pending | None = None
        self._reassembler = datagrams.Reassembler(wire, max_pending=2)
        self._transport: asyncio.DatagramTransport | None = None

    async def __aenter__(self) -> DataSource:
        await self.open()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _SourceProtocol(self),
                                                                 local_addr=self.local)
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)

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
        if tuple(addr[:2]) != self.worker:
            rejected["foreign sender"] += 1
            return
        try:
            rid, body = datagrams.split(data)
        except ProtocolError:
            rejected["truncated"] += 1
            return
        pending = self._pending
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
            rid = next(self._ids) & 0xFFFFFFFF
            loop = asyncio.get_running_loop()
            pending = _Pending(rid, req, loop.create_future())
            self._pending = pending
            out = datagrams.to_datagrams(packet, rid, self.wire)
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
                    except TimeoutError:
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
        await self.request(packets.AssignPipeline(pipeline))

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
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        batch = packets.Batch(np.asarray(inputs), np.asarray(targets), evaluate)
        while True:
            try:
                await self.request(batch)
                return
            except Refused as exc:
                if exc.reason != Refusal.QUEUE_FULL:
                    raise
                self.stats.queue_full += 1
            while not await self.queue_has_space():
                if loop.time() > end:
                    raise DeviceTimeoutError(f"worker {self.worker} queue stayed full for {deadline} s")
                await asyncio.sleep(poll)

    async def metric(self, model_id: int, metric: Metric | int) -> float:
        return await self.request(packets.GetMetric(model_id, int(metric)))

    async def get_model(self, model_id: int) -> ModelSpec:
        return await self.request(packets.GetModel(model_id))
