"""Bounds-checked, zero-copy access to FlatBuffers tables.

The stock ``flatbuffers.table.Table`` trusts every offset it reads, so a bit flip turns into an IndexError,
a struct.error or, worse, a plausible-looking wrong value. This reader uses the same wire rules (the sizes
come from ``flatbuffers.number_types``) but checks every offset and length against the buffer before use and
reports the table and field it was reading in a ``ModelFormatError``.

Vectors of scalars come back as ``np.frombuffer`` views and byte vectors as ``memoryview`` slices: nothing is
copied, so a 100 MB parameter blob costs nothing to "read".

Flatbuffer offsets may point many times at one table, string or vector, so a small file can describe a huge
tree. Each ``Buffer`` therefore has a decode budget proportional to its size (``BUDGET_FACTOR`` x bytes +
``BUDGET_BASE``): every table body and vector read is charged its byte size, once per *read* (a shared one
is charged each time it is reached), and readers charge what they hand out per reference (an operator's
custom code). A well-formed file reads each byte about once; a file that would expand past the budget is
refused with a ``ModelFormatError`` naming the field being read, before its values are built.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from flatbuffers import number_types as nt

from libredgetpu_ros.errors import ModelFormatError

_U8 = struct.Struct("<B")
_I8 = struct.Struct("<b")
_U16 = struct.Struct("<H")
_I16 = struct.Struct("<h")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_F32 = struct.Struct("<f")

UOFFSET = nt.UOffsetTFlags.bytewidth  # 4
SOFFSET = nt.SOffsetTFlags.bytewidth  # 4
VOFFSET = nt.VOffsetTFlags.bytewidth  # 2

# Scalar kinds accepted by Table.scalar(); numpy dtypes for Table.array().
SCALARS: dict[str, struct.Struct] = {
    "u8": _U8,
    "i8": _I8,
    "u16": _U16,
    "i16": _I16,
    "u32": _U32,
    "i32": _I32,
    "u64": _U64,
    "i64": _I64,
    "f32": _F32,
    "bool": _U8,
}
_NP = {
    "u8": "<u1",
    "i8": "<i1",
    "u16": "<u2",
    "i16": "<i2",
    "u32": "<u4",
    "i32": "<i4",
    "u64": "<u8",
    "i64": "<i8",
    "f32": "<f4",
    "f64": "<f8",
}


BUDGET_FACTOR = 4
BUDGET_BASE = 1 << 20


@dataclass(frozen=True, slots=True)
class Span:
    """A byte range [start, start + size) inside the buffer."""

    start: int
    size: int


class Buffer:
    """A flatbuffer held as a memoryview; ``what`` names it in error messages (file, "DarwiNN package")."""

    __slots__ = ("budget", "data", "size", "spent", "what")

    def __init__(self, data: memoryview, what: str) -> None:
        self.data = data
        self.size = len(data)
        self.what = what
        self.budget = BUDGET_FACTOR * self.size + BUDGET_BASE
        self.spent = 0

    def fail(self, message: str) -> ModelFormatError:
        return ModelFormatError(f"{self.what}: {message}")

    def charge(self, nbytes: int, where: str) -> None:
        """Count ``nbytes`` decoded for ``where`` against the budget; refuse the file once it is spent."""
        self.spent += nbytes
        if self.spent > self.budget:
            raise self.fail(
                f"{where}: decode budget of {self.budget} bytes ({BUDGET_FACTOR} x the {self.size}-byte "
                "buffer + 1 MiB) exceeded: the file references the same data over and over"
            )

    def check(self, pos: int, length: int, where: str) -> None:
        if pos < 0 or length < 0 or pos + length > self.size:
            raise self.fail(f"{where} at byte {pos} (+{length}) lies outside the {self.size}-byte buffer")

    def read(self, fmt: struct.Struct, pos: int, where: str) -> int | float:
        self.check(pos, fmt.size, where)
        return fmt.unpack_from(self.data, pos)[0]

    def root(self, name: str, identifier: bytes | None = None) -> Table:
        """The root table; optionally require the 4-byte file identifier at bytes 4..8."""
        if self.size < 8:
            raise self.fail(f"{self.size} bytes is too short for a flatbuffer")
        if identifier is not None and bytes(self.data[4:8]) != identifier:
            raise self.fail(f"file identifier is {bytes(self.data[4:8])!r}, expected {identifier!r}")
        return Table(self, int(self.read(_U32, 0, "root offset")), name)


class Table:
    """One table of a flatbuffer: resolves fields through its vtable, bounds-checking each step."""

    __slots__ = ("_vt", "_vt_len", "buf", "name", "pos")

    def __init__(self, buf: Buffer, pos: int, name: str) -> None:
        self.buf = buf
        self.pos = pos
        self.name = name
        vt = pos - int(buf.read(_I32, pos, f"{name} table"))
        buf.check(vt, 2 * VOFFSET, f"{name} vtable")
        vt_len, obj_len = _U16.unpack_from(buf.data, vt)[0], _U16.unpack_from(buf.data, vt + 2)[0]
        if vt_len < 4 or vt_len % 2:
            raise buf.fail(f"{name} vtable at byte {vt} has invalid length {vt_len}")
        buf.check(vt, vt_len, f"{name} vtable")
        buf.check(pos, obj_len, f"{name} table body")
        buf.charge(max(obj_len, 4), f"{name} table at byte {pos}")
        self._vt = vt
        self._vt_len = vt_len

    def field_pos(self, fid: int) -> int:
        """Absolute position of field ``fid`` or 0 when the field is absent (default value)."""
        slot = 4 + 2 * fid
        if slot >= self._vt_len:
            return 0
        off = _U16.unpack_from(self.buf.data, self._vt + slot)[0]
        return self.pos + off if off else 0

    def has(self, fid: int) -> bool:
        return self.field_pos(fid) != 0

    def scalar(self, fid: int, kind: str, default: int | float | bool = 0, label: str = "") -> int | float:
        p = self.field_pos(fid)
        if not p:
            return default
        value = self.buf.read(SCALARS[kind], p, f"{self.name}.{label or fid}")
        return bool(value) if kind == "bool" else value

    def _target(self, fid: int, label: str) -> int:
        p = self.field_pos(fid)
        if not p:
            return 0
        target = p + int(self.buf.read(_U32, p, f"{self.name}.{label}"))
        self.buf.check(target, 4, f"{self.name}.{label} target")
        return target

    def table(self, fid: int, name: str, label: str = "") -> Table | None:
        target = self._target(fid, label or name)
        return Table(self.buf, target, name) if target else None

    def vector(self, fid: int, elem_size: int, label: str) -> Span | None:
        """Span of a vector's elements (count * elem_size bytes), checked to fit the buffer."""
        target = self._target(fid, label)
        if not target:
            return None
        count = _U32.unpack_from(self.buf.data, target)[0]
        start = target + UOFFSET
        if count * elem_size > self.buf.size - start:
            raise self.buf.fail(
                f"{self.name}.{label}: vector of {count} elements x {elem_size} bytes at byte "
                f"{start} runs past the end of the {self.buf.size}-byte buffer"
            )
        self.buf.charge(4 + count * elem_size, f"{self.name}.{label}")
        return Span(start, count * elem_size)

    def bytes(self, fid: int, label: str) -> memoryview | None:
        span = self.vector(fid, 1, label)
        return None if span is None else self.buf.data[span.start : span.start + span.size]

    def array(self, fid: int, kind: str, label: str, width: int = 1) -> np.ndarray | None:
        """A vector of scalars (or of structs of ``width`` scalars) as a flat read-only numpy view."""
        dtype = np.dtype(_NP[kind])
        span = self.vector(fid, dtype.itemsize * width, label)
        if span is None:
            return None
        return np.frombuffer(self.buf.data, dtype=dtype, count=span.size // dtype.itemsize, offset=span.start)

    def ints(self, fid: int, kind: str, label: str) -> tuple[int, ...]:
        arr = self.array(fid, kind, label)
        return () if arr is None else tuple(arr.tolist())

    def string(self, fid: int, label: str) -> str | None:
        raw = self.bytes(fid, label)
        if raw is None:
            return None
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise self.buf.fail(f"{self.name}.{label} is not valid UTF-8 ({exc.reason})") from None

    def tables(self, fid: int, name: str, label: str) -> list[Table]:
        span = self.vector(fid, UOFFSET, label)
        if span is None:
            return []
        offs = np.frombuffer(self.buf.data, dtype="<u4", count=span.size // UOFFSET, offset=span.start)
        out = []
        for i, off in enumerate(offs.tolist()):
            target = span.start + UOFFSET * i + off
            self.buf.check(target, 4, f"{self.name}.{label}[{i}]")
            out.append(Table(self.buf, target, name))
        return out

    def byte_vectors(self, fid: int, label: str) -> list[memoryview]:
        """A vector of strings or [ubyte] vectors, as memoryviews (used for nested flatbuffers)."""
        span = self.vector(fid, UOFFSET, label)
        if span is None:
            return []
        offs = np.frombuffer(self.buf.data, dtype="<u4", count=span.size // UOFFSET, offset=span.start)
        out = []
        for i, off in enumerate(offs.tolist()):
            target = span.start + UOFFSET * i + off
            n = int(self.buf.read(_U32, target, f"{self.name}.{label}[{i}] length"))
            self.buf.check(target + 4, n, f"{self.name}.{label}[{i}]")
            self.buf.charge(n, f"{self.name}.{label}[{i}]")
            out.append(self.buf.data[target + 4 : target + 4 + n])
        return out

    def union(self, type_fid: int, value_fid: int, label: str) -> tuple[int, Table | None]:
        """(type code, table) of a union field; the value's table name is the union's label."""
        kind = int(self.scalar(type_fid, "u8", 0, f"{label}_type"))
        return kind, (self.table(value_fid, label) if kind else None)
