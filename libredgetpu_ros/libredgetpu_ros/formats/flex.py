"""Bounds-checked, zero-copy FlexBuffers reader for operator ``custom_options``.

CPU custom ops (PosenetDecoderOp, TFLite_Detection_PostProcess) keep their options in a FlexBuffers map, and
so does ``edgetpu-custom-op``: its map holds the DarwiNN package as a multi-megabyte string under key ``"4"``.
``flatbuffers.flexbuffers`` needs a ``bytes`` object (it calls ``.find`` on slices), which would copy that
package, and it trusts every offset. This reader follows the same wire format (type codes from
``flexbuffers.Type``) over a memoryview, checks each offset, and returns strings/blobs as memoryview slices
when asked to.

Offsets may point many times at one value, so a FlexBuffer of a few hundred bytes can describe a tree of
billions of nodes (a DAG of vectors sharing children). Decoding is charged against a budget proportional to
the buffer (``BUDGET_FACTOR`` x its size + ``BUDGET_BASE``): every value costs its bytes each time it is
reached, and a buffer that would expand past the budget is refused with a ``ModelFormatError`` before the
tree is built. A well-formed buffer reads each byte about once.
"""

from __future__ import annotations

import struct
from typing import Any

from flatbuffers.flexbuffers import Type

from libredgetpu_ros.errors import ModelFormatError

_MAX_DEPTH = 16
BUDGET_FACTOR = 4
BUDGET_BASE = 4096
_UINT = {1: struct.Struct("<B"), 2: struct.Struct("<H"), 4: struct.Struct("<I"), 8: struct.Struct("<Q")}
_INT = {1: struct.Struct("<b"), 2: struct.Struct("<h"), 4: struct.Struct("<i"), 8: struct.Struct("<q")}
_FLOAT = {4: struct.Struct("<f"), 8: struct.Struct("<d")}
_TYPED_VECTOR_ELEMENT = {
    Type.VECTOR_INT: Type.INT,
    Type.VECTOR_UINT: Type.UINT,
    Type.VECTOR_FLOAT: Type.FLOAT,
    Type.VECTOR_KEY: Type.KEY,
    Type.VECTOR_STRING_DEPRECATED: Type.STRING,
    Type.VECTOR_BOOL: Type.BOOL,
}


class FlexReader:
    """One FlexBuffer; ``what`` names its owner (file and operator) in error messages."""

    def __init__(self, data: bytes | memoryview, what: str, keep_views: bool = False) -> None:
        self.data = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
        self.size = len(self.data)
        self.what = what
        self.keep_views = keep_views  # strings/blobs as memoryview slices instead of str/bytes
        self.budget = BUDGET_FACTOR * self.size + BUDGET_BASE
        self.spent = 0

    def fail(self, message: str) -> ModelFormatError:
        return ModelFormatError(f"{self.what}: custom options FlexBuffer: {message}")

    def _charge(self, nbytes: int, pos: int) -> None:
        self.spent += nbytes
        if self.spent > self.budget:
            raise self.fail(
                f"decode budget of {self.budget} bytes ({BUDGET_FACTOR} x the {self.size}-byte buffer + "
                f"{BUDGET_BASE}) exceeded at byte {pos}: values are referenced over and over (a DAG)"
            )

    def _check(self, pos: int, n: int, where: str) -> None:
        if pos < 0 or n < 0 or pos + n > self.size:
            raise self.fail(f"{where} at byte {pos} (+{n}) outside the {self.size}-byte buffer")

    def _uint(self, pos: int, width: int) -> int:
        if width not in _UINT:
            raise self.fail(f"invalid byte width {width}")
        self._check(pos, width, "integer")
        return _UINT[width].unpack_from(self.data, pos)[0]

    def _scalar(self, pos: int, width: int, kind: int) -> Any:
        self._check(pos, width, "scalar")
        if kind in (Type.INT, Type.INDIRECT_INT):
            return _INT[width].unpack_from(self.data, pos)[0]
        if kind in (Type.UINT, Type.INDIRECT_UINT):
            return _UINT[width].unpack_from(self.data, pos)[0]
        if kind == Type.BOOL:
            return _UINT[width].unpack_from(self.data, pos)[0] != 0
        if width not in _FLOAT:
            raise self.fail(f"float of width {width}")
        return _FLOAT[width].unpack_from(self.data, pos)[0]

    def _indirect(self, pos: int, width: int) -> int:
        target = pos - self._uint(pos, width)
        self._check(target, 0, "offset target")
        return target

    def root(self) -> Any:
        if self.size < 3:
            raise self.fail(f"{self.size} bytes is too short")
        width = self.data[-1]
        packed = self.data[-2]
        if width not in _UINT:
            raise self.fail(f"root byte width {width} is not 1, 2, 4 or 8")
        return self.value(self.size - 2 - width, width, packed, 0)

    def value(self, pos: int, parent_width: int, packed: int, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise self.fail(f"nesting deeper than {_MAX_DEPTH}")
        kind, width = packed >> 2, 1 << (packed & 3)
        self._charge(parent_width, pos)
        if kind == Type.NULL:
            return None
        if kind in (Type.INT, Type.UINT, Type.FLOAT, Type.BOOL):
            return self._scalar(pos, parent_width, kind)
        target = self._indirect(pos, parent_width)
        if kind in (Type.INDIRECT_INT, Type.INDIRECT_UINT, Type.INDIRECT_FLOAT):
            return self._scalar(target, width, kind)
        if kind == Type.KEY:
            return self._key(target)
        if kind in (Type.STRING, Type.BLOB):
            n = self._uint(target - width, width)
            self._check(target, n, "string/blob")
            self._charge(n, target)
            view = self.data[target : target + n]
            if self.keep_views:
                return view
            return bytes(view) if kind == Type.BLOB else str(view, "utf-8", errors="replace")
        if kind == Type.MAP:
            return self._map(target, width, depth)
        if kind == Type.VECTOR:
            n = self._length(target, width)
            types = target + n * width
            self._check(types, n, "vector element types")
            return [self.value(target + i * width, width, self.data[types + i], depth + 1) for i in range(n)]
        if kind in _TYPED_VECTOR_ELEMENT:
            elem = _TYPED_VECTOR_ELEMENT[Type(kind)]
            return self._typed(target, self._length(target, width), width, elem, depth)
        if Type.VECTOR_INT2 <= kind <= Type.VECTOR_FLOAT4:
            count = (kind - Type.VECTOR_INT2) // 3 + 2
            elem = Type.INT + (kind - Type.VECTOR_INT2) % 3
            self._charge(count * width, target)
            return self._typed(target, count, width, elem, depth)
        raise self.fail(f"unsupported value type {kind}")

    def _length(self, target: int, width: int) -> int:
        n = self._uint(target - width, width)
        if n * width > self.size - target:
            raise self.fail(f"container of {n} elements x {width} bytes at byte {target} runs past the end")
        self._charge(n * width, target)
        return n

    def _typed(self, target: int, n: int, width: int, elem: int, depth: int) -> list[Any]:
        self._check(target, n * width, "typed vector")
        if elem == Type.KEY:
            return [self._key(self._indirect(target + i * width, width)) for i in range(n)]
        if elem == Type.STRING:
            return [
                self.value(
                    target + i * width, width, (Type.STRING << 2) | (width.bit_length() - 1), depth + 1
                )
                for i in range(n)
            ]
        return [self._scalar(target + i * width, width, elem) for i in range(n)]

    def _key(self, target: int) -> str:
        end = target
        limit = min(self.size, target + 4096)  # keys are short names; bounded scan for the terminator
        while end < limit and self.data[end] != 0:
            end += 1
        if end >= limit:
            raise self.fail(f"unterminated key at byte {target}")
        self._charge(end - target + 1, target)
        return str(self.data[target:end], "utf-8", errors="replace")

    def _map(self, target: int, width: int, depth: int) -> dict[str, Any]:
        n = self._length(target, width)
        keys_pos = target - 3 * width
        keys = self._indirect(keys_pos, width)
        keys_width = self._uint(target - 2 * width, width)
        if keys_width not in _UINT:
            raise self.fail(f"map keys byte width {keys_width}")
        if self._uint(keys - keys_width, keys_width) != n:
            raise self.fail(f"map at byte {target} has {n} values but a different number of keys")
        self._charge(n * keys_width, keys)
        names = self._typed(keys, n, keys_width, Type.KEY, depth)
        types = target + n * width
        self._check(types, n, "map value types")
        return {
            name: self.value(target + i * width, width, self.data[types + i], depth + 1)
            for i, name in enumerate(names)
        }


def decode_flexbuffer(data: bytes | memoryview, what: str, keep_views: bool = False) -> Any:
    """The root value of a FlexBuffer (a dict for custom options); ``what`` names the op in errors."""
    return FlexReader(data, what, keep_views).root()
