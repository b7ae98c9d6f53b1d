"""Wire constants of the Team Tensor protocol and the one setting that fixes what the seed leaves open.

The seed (design seed 004) fixes opcodes, field widths and the column-major tensor layout, but not the
element type of tensor values, the size of a metric value, the codes of metrics and objectives, nor what the
second BATCH opcode (0x0b) means. :class:`WireFormat` holds every such choice in one place; the codec,
the worker and the Data Source all take one. Multi-byte header fields are big-endian (network order, the
order the seed's ``0x0003`` notation reads in).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import numpy as np

from libredgetpu_ros.errors import ProtocolError


class Op(enum.IntEnum):
    """One-byte packet headers fixed by the seed (0x0b and our fragment opcode live in WireFormat)."""

    HELLO = 0x01
    ACK = 0x02
    NACK = 0x03
    ASN_DP = 0x04
    ASN_MD = 0x05
    M_FULL = 0x06
    B_FULL = 0x07
    BATCH = 0x08
    GET_MT = 0x09
    GET_MD = 0x0A


class LayerCode(enum.IntEnum):
    LINEAR = 0x01
    CONV2D = 0x02
    RELU = 0x03
    MAXPOOL = 0x04
    FLATTEN = 0x05
    SOFTMAX = 0x06


class Metric(enum.IntEnum):
    """Metric codes (one byte each). The first metric of a model is its objective and must be a loss."""

    MSE = 0x01
    CROSS_ENTROPY = 0x02
    ACCURACY = 0x03
    MAE = 0x04


LOSSES = frozenset({Metric.MSE, Metric.CROSS_ENTROPY})


class Refusal(enum.IntEnum):
    """The reason byte a worker's NACK carries (our addition: the seed's NACK has no payload)."""

    QUEUE_FULL = 0x01
    NO_PIPELINE = 0x02
    WRONG_PIPELINE = 0x03
    NO_MANAGER = 0x04
    UNKNOWN_MODEL = 0x05
    BAD_MODEL = 0x06
    SHAPE_MISMATCH = 0x07
    UNKNOWN_METRIC = 0x08
    NO_DATA = 0x09
    BUSY = 0x0A  # another Data Source holds the worker's session (reliable framing)
    OVER_BUDGET = 0x0B  # training this batch would need more memory than the worker's budget
    MALFORMED = 0x0C  # the packet cannot be decoded (seed framing: answered instead of dropped in silence)
    CHALLENGE = 0x0D  # HMAC mode: claim again with this NACK's 4-byte nonce as the session number
    NO_TARGETS = 0x0E  # a BATCH of one tensor per sample (the seed's literal layout): nothing to train on


FRAMINGS = ("reliable", "seed")


@dataclass(frozen=True)
class WireFormat:
    """Every choice the seed leaves open, in one object.

    - ``value_dtype``: element type and byte order of tensor values (NumPy dtype string). Default ``>f4``
      (IEEE float32, big-endian): training needs floats, and the seed writes words most significant first.
      The seed's two integer examples are reproduced with ``>i4``.
    - ``metric_dtype``: the "floating point size" of a GET_MT reply value (default ``>f4``).
    - ``eval_opcode``: what 0x0b ("upload a batch of inputs") means here: an *evaluation* batch (same layout
      as BATCH, forward pass and metrics only, weights untouched), the seed's evaluation phase.
    - ``fragment_opcode``: our addition (0x0c): one part of a packet too large for one datagram.
    - ``max_datagram``: largest UDP payload we send (fragments are cut to fit it), including the trailer
      (12 bytes, 24 with an HMAC). 1400 keeps a datagram inside an Ethernet MTU.
    - ``max_packet``: largest reassembled packet accepted (bounds reassembly memory).
    - ``maxpool_window``: MaxPool carries no parameters in the seed: a fixed k×k window with stride k.
    - ``framing``: ``reliable`` (default) appends our trailer (session, request id, CRC-32 or HMAC tag) to
      every datagram, fragments large packets and gives exactly-once sessions; ``seed`` sends exactly the
      seed's bytes (no trailer, no fragments, NACK without a reason, GET_MT without a model id, no reply to a
      BATCH): stop-and-wait and best effort, for peers built from the seed alone.
    - ``release_opcode``: our addition (0x0d, reliable framing only): the Data Source ends its session.
    """

    value_dtype: str = ">f4"
    metric_dtype: str = ">f4"
    eval_opcode: int = 0x0B
    fragment_opcode: int = 0x0C
    max_datagram: int = 1400
    max_packet: int = 16 * 1024 * 1024
    maxpool_window: int = 2
    framing: str = "reliable"
    release_opcode: int = 0x0D

    def __post_init__(self) -> None:
        for name in ("value_dtype", "metric_dtype"):
            try:
                dt = np.dtype(getattr(self, name))
            except TypeError:
                raise ProtocolError(f"WireFormat.{name} = {getattr(self, name)!r}: not a NumPy dtype") \
                    from None
            if dt.kind not in "fiu" or dt.itemsize not in (1, 2, 4, 8):
                raise ProtocolError(f"WireFormat.{name} = {getattr(self, name)!r}: not a numeric dtype")
        used = {int(op) for op in Op}
        ours = (self.eval_opcode, self.fragment_opcode, self.release_opcode)
        if used & set(ours) or len(set(ours)) != len(ours):
            raise ProtocolError(f"WireFormat opcodes eval={self.eval_opcode:#x} fragment="
                                f"{self.fragment_opcode:#x} release={self.release_opcode:#x} collide with "
                                "the seed's opcodes or each other")
        if self.framing not in FRAMINGS:
            raise ProtocolError(f"WireFormat.framing = {self.framing!r}: not one of {', '.join(FRAMINGS)}")
        if not 64 <= self.max_datagram <= 65507:
            raise ProtocolError(f"WireFormat.max_datagram = {self.max_datagram}: outside [64, 65507]")
        if self.maxpool_window < 1:
            raise ProtocolError(f"WireFormat.maxpool_window = {self.maxpool_window}: must be >= 1")

    @property
    def seed(self) -> bool:
        """True for the seed's own bytes (no trailer, fragments, ids, NACK reasons)."""
        return self.framing == "seed"

    @property
    def values(self) -> np.dtype:
        return np.dtype(self.value_dtype)

    @property
    def metric(self) -> np.dtype:
        return np.dtype(self.metric_dtype)


DEFAULT_WIRE = WireFormat()

# Reliable framing: every datagram ends with [session u32][request id u32][tag]; the tag is a CRC-32 (4 bytes)
# or, with a shared key, a truncated HMAC-SHA256 (16 bytes) over everything before it.
TRAILER_IDS = struct.Struct(">II")
CRC_TAG = 4
HMAC_TAG = 16
FRAGMENT_HEADER = struct.Struct(">BIII")  # opcode, total packet length, offset, CRC-32 of the whole packet


class Reader:
    """A bounded cursor over one packet: every read checks the bytes are there and names the field."""

    __slots__ = ("buf", "pos", "what")

    def __init__(self, buf: bytes | memoryview, what: str, pos: int = 0) -> None:
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
        self.pos = pos
        self.what = what

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def need(self, n: int, field: str) -> None:
        if n < 0 or n > self.remaining:
            raise ProtocolError(f"{self.what}: {field} needs {n} byte(s) at offset {self.pos}, "
                                f"{self.remaining} left (truncated or length field out of bounds)")

    def take(self, n: int, field: str) -> memoryview:
        self.need(n, field)
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def u8(self, field: str) -> int:
        self.need(1, field)
        self.pos += 1
        return self.buf[self.pos - 1]

    def u16(self, field: str) -> int:
        return int.from_bytes(self.take(2, field), "big")

    def u32(self, field: str) -> int:
        return int.from_bytes(self.take(4, field), "big")

    def done(self) -> None:
        if self.remaining:
            raise ProtocolError(f"{self.what}: {self.remaining} unexpected trailing byte(s) at offset "
                                f"{self.pos}")


def check_range(value: int, lo: int, hi: int, field: str) -> int:
    if not lo <= value <= hi:
        raise ProtocolError(f"{field} = {value} outside [{lo}, {hi}]")
    return value
