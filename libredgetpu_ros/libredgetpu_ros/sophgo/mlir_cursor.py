"""Token readers for one line of Top MLIR: strings, numbers, attribute dictionaries and tensor types.

Every size is bounded (rank, element count, number of per-axis scales) before anything is built.
"""

from __future__ import annotations

import math
import re

from libredgetpu_ros.sophgo.ir import (
    ELEMENT_TO_DTYPE,
    F64,
    I64,
    NONE_TYPE,
    SI32,
    STORAGE_TO_DTYPE,
    AttrValue,
    Quant,
    TensorType,
    TpuLangError,
)
from libredgetpu_ros.textdata import clip

MAX_ELEMENTS = 1 << 31  # per tensor: refuse types whose buffers could not be allocated anyway
MAX_RANK = 8
_FLOAT = re.compile(r"[-+]?(?:0x[0-9A-Fa-f]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")
_INT = re.compile(r"[-+]?\d+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*")


class Cursor:
    """A position in one line of text, with the small token readers the Top syntax needs."""

    def __init__(self, text: str, where: str) -> None:
        self.text, self.pos, self.where = text, 0, where

    def fail(self, message: str) -> TpuLangError:
        snippet = self.text[self.pos:self.pos + 40]
        return TpuLangError(f"{self.where}: {message} at column {self.pos + 1} (near {snippet!r})")

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def peek(self, literal: str) -> bool:
        self.ws()
        return self.text.startswith(literal, self.pos)

    def accept(self, literal: str) -> bool:
        if self.peek(literal):
            self.pos += len(literal)
            return True
        return False

    def expect(self, literal: str) -> None:
        if not self.accept(literal):
            raise self.fail(f"expected {literal!r}")

    def regex(self, pattern: re.Pattern, what: str) -> str:
        self.ws()
        match = pattern.match(self.text, self.pos)
        if not match:
            raise self.fail(f"expected {what}")
        self.pos = match.end()
        return match.group(0)

    def string(self) -> str:
        """A quoted string with MLIR's escapes (``\\XX`` bytes, ``\\"``, ``\\\\``, ``\\n``, ``\\t``)."""
        self.expect('"')
        out = bytearray()
        while True:
            if self.pos >= len(self.text):
                raise self.fail("unterminated string")
            ch = self.text[self.pos]
            self.pos += 1
            if ch == '"':
                try:
                    return out.decode("utf-8")
                except UnicodeDecodeError:
                    raise self.fail("string is not valid UTF-8") from None
            if ch == "\\":
                esc = self.text[self.pos:self.pos + 1]
                pair = self.text[self.pos:self.pos + 2]
                if esc and esc in '"\\nt':
                    out += {"n": b"\n", "t": b"\t"}.get(esc, esc.encode())
                    self.pos += 1
                elif re.fullmatch(r"[0-9A-Fa-f]{2}", pair):
                    out.append(int(pair, 16))
                    self.pos += 2
                else:
                    raise self.fail(f"unknown escape \\{esc}")
            else:
                out += ch.encode("utf-8")

    def integer(self) -> int:
        text = self.regex(_INT, "an integer")
        if len(text) > 20:
            raise self.fail("integer too long")
        return int(text)

    def floating(self) -> float:
        text = self.regex(_FLOAT, "a float")
        if text.lstrip("-+").startswith("0x"):
            import struct

            bits = int(text.lstrip("-+"), 16)
            if bits >> 64:
                raise self.fail("hex float wider than 64 bits")
            value = struct.unpack("<d", bits.to_bytes(8, "little"))[0]
        else:
            value = float(text)
        if not math.isfinite(value):  # an overflowing literal, or inf/NaN bits: TpuLang never writes them
            raise self.fail(f"float {clip(text, 40)} is not finite")
        return value

    def end(self) -> None:
        self.ws()
        if self.pos != len(self.text):
            raise self.fail("unexpected trailing text")

    # -- attributes ---------------------------------------------------------------------------------
    def attr_value(self, depth: int = 0) -> AttrValue:
        if depth > 4:
            raise self.fail("attribute nesting too deep")
        if self.accept("true"):
            return True
        if self.accept("false"):
            return False
        if self.peek('"'):
            return self.string()
        if self.accept("["):
            items: list = []
            if not self.accept("]"):
                while True:
                    items.append(self.attr_value(depth + 1))
                    if self.accept("]"):
                        break
                    self.expect(",")
            return [_element(item) for item in items]
        number = self.regex(_FLOAT, "an attribute value")
        if self.accept(":"):
            kind = self.regex(_IDENT, "a type")
            try:
                if kind == "i64":
                    return I64(int(number))
                if kind == "si32":
                    return SI32(int(number))
                if kind == "f64":
                    return F64(Cursor(number, self.where).floating())
            except ValueError:
                raise self.fail(f"{number!r} is not a valid {kind}") from None
            raise self.fail(f"unsupported attribute type {kind!r}")
        if _INT.fullmatch(number):
            return _Bare(int(number))
        return _BareFloat(Cursor(number, self.where).floating())

    def attr_dict(self) -> dict[str, AttrValue]:
        self.expect("{")
        attrs: dict[str, AttrValue] = {}
        if self.accept("}"):
            return attrs
        while True:
            key = self.regex(_IDENT, "an attribute name")
            self.expect("=")
            value = self.attr_value()
            if isinstance(value, (_Bare, _BareFloat)):
                raise self.fail(f"attribute {key} needs a type")
            attrs[key] = value
            if self.accept("}"):
                return attrs
            self.expect(",")

    # -- types --------------------------------------------------------------------------------------
    def tensor_type(self) -> TensorType:
        if self.accept("none"):
            return NONE_TYPE
        self.expect("tensor<")
        shape: tuple[int, ...] | None
        if self.accept("*x"):
            shape = None
        else:
            dims = []
            while True:
                self.ws()
                match = re.compile(r"(\d+)x").match(self.text, self.pos)
                if not match:
                    break
                dims.append(int(match.group(1)))
                self.pos = match.end()
                if len(dims) > MAX_RANK:
                    raise self.fail(f"rank above {MAX_RANK}")
            elements = 1
            for d in dims:
                elements *= d
            if any(d == 0 for d in dims) or elements > MAX_ELEMENTS:
                raise self.fail(f"tensor shape {dims} is empty or too large")
            shape = tuple(dims)
        if self.accept("!quant.uniform<"):
            dtype, quant = self._quant()
        else:
            element = self.regex(_IDENT, "an element type")
            if element not in ELEMENT_TO_DTYPE:
                raise self.fail(f"unsupported element type {element!r}")
            dtype, quant = ELEMENT_TO_DTYPE[element], None
        self.expect(">")
        return TensorType(shape, dtype, quant)

    def _quant(self) -> tuple[str, Quant]:
        storage = self.regex(_IDENT, "a storage type")
        if storage not in STORAGE_TO_DTYPE:
            raise self.fail(f"unsupported quant storage type {storage!r}")
        self.expect(":")
        self.expect("f32")
        axis = None
        if self.accept(":"):
            axis = self.integer()
            if not 0 <= axis < MAX_RANK:
                raise self.fail(f"quantized dimension {axis} out of range")
        self.expect(",")
        pairs = []
        braced = self.accept("{")
        if braced != (axis is not None):
            raise self.fail("per-axis quantization needs both ':axis' and '{...}'")
        while True:
            scale = self.floating()
            zp = self.integer() if self.accept(":") else 0
            if not scale > 0 or scale == float("inf"):
                raise self.fail(f"quant scale {scale} must be positive and finite")
            pairs.append((scale, zp))
            if not braced or not self.accept(","):
                break
            if len(pairs) > 1 << 16:
                raise self.fail("too many per-axis scales")
        if braced:
            self.expect("}")
        self.expect(">")  # closes !quant.uniform<...>; the caller closes tensor<...>
        dtype = STORAGE_TO_DTYPE[storage]
        return dtype, Quant(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), axis)

    def type_list(self) -> list[TensorType]:
        self.expect("(")
        types: list[TensorType] = []
        if self.accept(")"):
            return types
        while True:
            types.append(self.tensor_type())
            if self.accept(")"):
                return types
            self.expect(",")


class _Bare(int):
    """An untyped integer (``[1, 1]``): an i64 inside an array, an error at the top level."""


class _BareFloat(float):
    """An untyped float (``[1.000000e+00]``): an f64 inside an array, an error at the top level."""


def _element(item: AttrValue) -> AttrValue:
    if isinstance(item, _Bare):
        return int(item)
    if isinstance(item, _BareFloat):
        return F64(float(item))
    return item
