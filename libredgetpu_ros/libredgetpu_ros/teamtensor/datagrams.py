"""Packets <-> UDP datagrams: the request id trailer, fragments, and bounded reassembly.

Every datagram is ``body ‖ request id (u32, big-endian)``. The body is a whole seed packet when it fits
``WireFormat.max_datagram``; otherwise the packet travels as fragments
``[fragment opcode][total length u32][offset u32][CRC-32 of the packet u32][chunk]``, all with the
request id of the packet. A reply carries the id of the request it answers, so the Data Source can tell a
late answer to an earlier (retransmitted) request from the one it waits for.

Reassembly keeps the chunks received so far (never more than the declared total, itself bounded by
``max_packet``), at most ``max_pending`` packets at once (the oldest is dropped), and checks coverage and
the CRC before handing a packet up: a forged or corrupted chunk drops the partial packet and the sender's
retransmission rebuilds it.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter, OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, FRAGMENT_HEADER, REQUEST_ID, WireFormat

TRAILER = REQUEST_ID.size


@dataclass
class RejectedDatagrams:
    """Received datagrams not acted on, counted by reason: both ends keep these (in their stats) so that
    nothing is dropped silently."""

    rejected: Counter = field(default_factory=Counter)

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())


def to_datagrams(packet: bytes, request_id: int, wire: WireFormat = DEFAULT_WIRE) -> list[bytes]:
    """The datagrams carrying ``packet`` (one, or fragments of at most ``max_datagram`` bytes)."""
    if len(packet) > wire.max_packet:
        raise ProtocolError(f"packet of {len(packet)} bytes exceeds WireFormat.max_packet = "
                            f"{wire.max_packet}")
    rid = REQUEST_ID.pack(request_id)
    if len(packet) + TRAILER <= wire.max_datagram:
        return [packet + rid]
    chunk = wire.max_datagram - FRAGMENT_HEADER.size - TRAILER
    crc = zlib.crc32(packet)
    view = memoryview(packet)
    return [FRAGMENT_HEADER.pack(wire.fragment_opcode, len(packet), off, crc) + view[off:off + chunk] + rid
            for off in range(0, len(packet), chunk)]


def split(datagram: bytes | memoryview) -> tuple[int, memoryview]:
    """(request id, body) of one datagram; too short to hold an opcode and the id is a ProtocolError."""
    if len(datagram) < 1 + TRAILER:
        raise ProtocolError(f"datagram of {len(datagram)} byte(s): shorter than opcode + request id")
    view = memoryview(datagram)
    return REQUEST_ID.unpack(view[-TRAILER:])[0], view[:-TRAILER]


class _Partial:
    __slots__ = ("chunks", "crc", "received", "total", "touched")

    def __init__(self, total: int, crc: int) -> None:
        self.total, self.crc = total, crc
        self.chunks: dict[int, bytes] = {}
        self.received = 0
        self.touched = time.monotonic()


class Reassembler:
    """Collects fragments per key (peer, request id); :meth:`feed` returns the packet once complete."""

    def __init__(self, wire: WireFormat = DEFAULT_WIRE, max_pending: int = 8, ttl: float = 10.0) -> None:
        self.wire = wire
        self.max_pending = max_pending
        self.ttl = ttl
        self._partials: OrderedDict[Hashable, _Partial] = OrderedDict()
        self.dropped = 0  # partial packets given up (evicted, expired, corrupt)

    def is_fragment(self, body: memoryview) -> bool:
        return len(body) > 0 and body[0] == self.wire.fragment_opcode

    @property
    def pending_bytes(self) -> int:
        return sum(p.received for p in self._partials.values())

    def discard(self, key: Hashable) -> None:
        self._partials.pop(key, None)

    def feed(self, key: Hashable, body: memoryview) -> bytes | None:
        if len(body) <= FRAGMENT_HEADER.size:
            raise ProtocolError(f"fragment of {len(body)} byte(s): no room for header and data")
        _op, total, offset, crc = FRAGMENT_HEADER.unpack(body[:FRAGMENT_HEADER.size])
        data = bytes(body[FRAGMENT_HEADER.size:])
        if not 0 < total <= self.wire.max_packet:
            raise ProtocolError(f"fragment: total length = {total} outside [1, {self.wire.max_packet}]")
        if offset + len(data) > total:
            raise ProtocolError(f"fragment: offset {offset} + {len(data)} bytes past total length {total}")
        self._expire()
        part = self._partials.get(key)
        if part is None:
            part = _Partial(total, crc)
            self._partials[key] = part
            while len(self._partials) > self.max_pending:
                self._partials.popitem(last=False)
                self.dropped += 1
        elif (part.total, part.crc) != (total, crc):
            self._drop(key)
            raise ProtocolError(f"fragment: total {total}/CRC {crc:#010x} differ from the first fragment's "
                                f"{part.total}/{part.crc:#010x}")
        part.touched = time.monotonic()
        self._partials.move_to_end(key)
        old = part.chunks.get(offset)
        if old is not None:
            if old != data:
                self._drop(key)
                raise ProtocolError(f"fragment: offset {offset} resent with different bytes")
            return None  # a duplicate: nothing new
        if part.received + len(data) > total:
            self._drop(key)
            raise ProtocolError(f"fragment: overlapping chunks exceed total length {total}")
        part.chunks[offset] = data
        part.received += len(data)
        if part.received < total:
            return None
        self._partials.pop(key)
        pos, pieces = 0, []
        for off in sorted(part.chunks):
            if off != pos:
                self.dropped += 1
                raise ProtocolError(f"fragment: chunks do not tile the packet (gap or overlap at {pos})")
            pieces.append(part.chunks[off])
            pos += len(part.chunks[off])
        packet = b"".join(pieces)
        if zlib.crc32(packet) != crc:
            self.dropped += 1
            raise ProtocolError(f"fragment: reassembled packet fails its CRC-32 ({crc:#010x})")
        return packet

    def _drop(self, key: Hashable) -> None:
        if self._partials.pop(key, None) is not None:
            self.dropped += 1

    def _expire(self) -> None:
        now = time.monotonic()
        while self._partials:
            key, oldest = next(iter(self._partials.items()))
            if now - oldest.touched < self.ttl:
                break
            self._drop(key)
