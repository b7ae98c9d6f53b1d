"""Packets <-> UDP datagrams: the integrity trailer, sessions and request ids, fragments, bounded reassembly.

Reliable framing (default): every datagram is ``body ‖ session u32 ‖ request id u32 ‖ tag``. The tag is a
CRC-32 of everything before it or, with a shared key, a 16-byte truncated HMAC-SHA256; it is checked before
anything else looks at the datagram, so a corrupted opcode, payload, session or request id is dropped (and
counted), never taken for another request. The session is a random number the Data Source picks when it
opens; request ids are scoped to it. The body is a whole seed packet when it fits ``max_datagram``;
otherwise the packet travels as fragments
``[fragment opcode][total length u32][offset u32][CRC-32 of the packet u32][chunk]``, all with the
session and request id of the packet. A reply carries the session and id of the request it answers.

Seed framing: a datagram is exactly one seed packet (no trailer, no fragments); see :class:`Framer`.

Reassembly keeps the chunks received so far (never more than the declared total, itself bounded by
``max_packet``), at most ``max_pending`` packets at once (the oldest is dropped), and checks coverage and
the CRC before handing a packet up: a forged or corrupted chunk drops the partial packet and the sender's
retransmission rebuilds it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import zlib
from collections import Counter, OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import NamedTuple

from libredgetpu_ros.errors import ConfigError, ProtocolError
from libredgetpu_ros.teamtensor.wire import (
    CRC_TAG,
    DEFAULT_WIRE,
    FRAGMENT_HEADER,
    HMAC_TAG,
    TRAILER_IDS,
    WireFormat,
)

MAX_UDP_PAYLOAD = 65507  # largest IPv4 UDP payload: the seed framing's only limit on a packet


class IntegrityError(ProtocolError):
    """A datagram whose CRC-32 or HMAC tag does not match: corrupted in transit, or not from a key holder."""


@dataclass
class RejectedDatagrams:
    """Received datagrams not acted on, counted by reason: both ends keep these (in their stats) so that
    nothing is dropped silently."""

    rejected: Counter = field(default_factory=Counter)

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())


class Sealed(NamedTuple):
    """What an opened datagram carries: its session, request id and body (the seed packet or a fragment)."""

    session: int
    rid: int
    body: memoryview


class Framer:
    """Seals packets into datagrams and opens received datagrams, for one ``WireFormat`` and optional key.

    Both ends must use the same framing and key. With ``key`` the tag is an HMAC: a datagram from anyone
    without the key is rejected exactly like a corrupted one.
    """

    def __init__(self, wire: WireFormat = DEFAULT_WIRE, key: bytes | None = None) -> None:
        if key is not None and not key:
            raise ProtocolError("shared key: empty (give none for no authentication)")
        if key is not None and wire.seed:
            raise ProtocolError("shared key: the seed framing has no room for an authentication tag")
        self.wire, self.key = wire, key
        self.tag_size = 0 if wire.seed else HMAC_TAG if key else CRC_TAG
        self.overhead = 0 if wire.seed else TRAILER_IDS.size + self.tag_size

    def _tag(self, *parts: bytes | memoryview) -> bytes:
        """The tag of the concatenation of ``parts`` (computed piecewise: no joined copy is made for it)."""
        if self.key is not None:
            mac = hmac.new(self.key, digestmod=hashlib.sha256)
            for part in parts:
                mac.update(part)
            return mac.digest()[:HMAC_TAG]
        crc = 0
        for part in parts:
            crc = zlib.crc32(part, crc)
        return crc.to_bytes(CRC_TAG, "big")

    def seal(self, packet: bytes, session: int = 0, rid: int = 0) -> list[bytes]:
        """The datagrams carrying ``packet`` (one, or fragments of at most ``max_datagram`` bytes)."""
        wire = self.wire
        if wire.seed:
            if len(packet) > MAX_UDP_PAYLOAD:
                raise ProtocolError(f"packet of {len(packet)} bytes: the seed framing has no fragments and "
                                    f"a UDP datagram holds at most {MAX_UDP_PAYLOAD}")
            return [packet]
        if len(packet) > wire.max_packet:
            raise ProtocolError(f"packet of {len(packet)} bytes exceeds WireFormat.max_packet = "
                                f"{wire.max_packet}")
        ids = TRAILER_IDS.pack(session & 0xFFFFFFFF, rid & 0xFFFFFFFF)
        if len(packet) + self.overhead <= wire.max_datagram:
            return [b"".join((packet, ids, self._tag(packet, ids)))]
        chunk = wire.max_datagram - FRAGMENT_HEADER.size - self.overhead
        crc = zlib.crc32(packet)
        view = memoryview(packet)
        out = []
        for off in range(0, len(packet), chunk):  # one copy per datagram: header, chunk, ids and tag joined
            head = FRAGMENT_HEADER.pack(wire.fragment_opcode, len(packet), off, crc)
            piece = view[off:off + chunk]
            out.append(b"".join((head, piece, ids, self._tag(head, piece, ids))))
        return out

    def open(self, datagram: bytes | memoryview) -> Sealed:
        """Check the tag first, then split off the trailer; a bad or short datagram is a ProtocolError
        (:class:`IntegrityError` when the tag does not match)."""
        view = memoryview(datagram)
        if self.wire.seed:
            if not len(view):
                raise ProtocolError("empty datagram")
            return Sealed(0, 0, view)
        if len(view) < 1 + self.overhead:
            raise ProtocolError(f"datagram of {len(view)} byte(s): shorter than opcode + trailer "
                                f"({self.overhead} bytes)")
        cut = len(view) - self.tag_size
        if self.key is None:
            ok = zlib.crc32(view[:cut]) == int.from_bytes(view[cut:], "big")
        else:  # constant time: a forger learns nothing from how fast a wrong tag is refused
            ok = hmac.compare_digest(self._tag(view[:cut]), view[cut:])
        if not ok:
            raise IntegrityError(f"datagram of {len(view)} bytes fails its "
                                 f"{'HMAC' if self.key else 'CRC-32'} tag")
        session, rid = TRAILER_IDS.unpack_from(view, cut - TRAILER_IDS.size)
        return Sealed(session, rid, view[:cut - TRAILER_IDS.size])


MAX_KEY_FILE_BYTES = 64 << 10


def read_key(key: str | None, key_file: str | None) -> bytes | None:
    """A shared key given as text or as the first line of a file (UTF-8, surrounding whitespace stripped);
    None when neither is given. Both, an empty key or an unreadable file are a ConfigError."""
    if key and key_file:
        raise ConfigError("give a shared key or a key file, not both")
    if key_file:
        from libredgetpu_ros.paths import read_regular
        from libredgetpu_ros.textdata import clip

        # a regular file of at most 64 KiB: a FIFO blocked the trainer's configure, /dev/zero never ended
        data = read_regular(key_file, "key file", MAX_KEY_FILE_BYTES, ConfigError)
        try:
            key = data.decode("utf-8").split("\n", 1)[0]
        except UnicodeDecodeError as exc:
            raise ConfigError(f"key file {clip(key_file)}: not UTF-8 ({exc.reason} at byte {exc.start})") \
                from None
        if not key.strip():
            raise ConfigError(f"key file {clip(key_file)}: empty first line")
    if key is None:
        return None
    if not key.strip():
        raise ConfigError("shared key is empty")
    return key.strip().encode()


def to_datagrams(packet: bytes, request_id: int, wire: WireFormat = DEFAULT_WIRE, *, session: int = 0,
                 key: bytes | None = None) -> list[bytes]:
    """``Framer(wire, key).seal(packet, session, request_id)``."""
    return Framer(wire, key).seal(packet, session, request_id)


def split(datagram: bytes | memoryview, wire: WireFormat = DEFAULT_WIRE,
          key: bytes | None = None) -> tuple[int, memoryview]:
    """(request id, body) of one datagram after its integrity check (see :meth:`Framer.open`)."""
    sealed = Framer(wire, key).open(datagram)
    return sealed.rid, sealed.body


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
