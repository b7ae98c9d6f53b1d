"""How MLIR prints the pieces of a Top module: floats, attributes, tensor and quant types.

Floats follow MLIR's ``printFloatValue``: LLVM ``APFloat::toString`` with 6 digits in exponent form if that
parses back to the same double, else the shortest-safe 17-digit form. The digit generation is a port of
``toStringImpl`` (including its binary pre-truncation), because Python's ``%e`` rounds differently on ties.
"""

from __future__ import annotations

import math
import struct

from libredgetpu_ros.sophgo.ir import DTYPES, F64, I64, SI32, AttrValue, Quant, TensorType

_DOUBLE_PRECISION = 53


def _round_digits(digits: str, exp: int, precision: int) -> tuple[str, int]:
    """LLVM's AdjustToPrecision on a most-significant-first digit string (round half up on one digit)."""
    n = len(digits)
    if n <= precision:
        return digits, exp
    keep = digits[:precision]
    if digits[precision] < "5":
        stripped = keep.rstrip("0")
        return stripped, exp + (n - precision) + (len(keep) - len(stripped))
    trailing_nines = len(keep) - len(keep.rstrip("9"))
    if trailing_nines == len(keep):
        return "1", exp + n
    cut = len(keep) - trailing_nines
    return keep[: cut - 1] + chr(ord(keep[cut - 1]) + 1), exp + (n - precision) + trailing_nines


def apfloat_to_string(value: float, precision: int = 0, max_padding: int = 3,
                      truncate_zero: bool = True) -> str:
    """``APFloat(double)::toString(precision, max_padding, truncate_zero)`` for finite values."""
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0.0:
        if max_padding:
            return sign + "0"
        if truncate_zero:
            return sign + "0.0E+0"
        return sign + "0.0" + "0" * max(precision - 1, 0) + "e+00"
    mantissa, exponent = math.frexp(abs(value))
    significand = int(mantissa * (1 << _DOUBLE_PRECISION))
    exp = exponent - _DOUBLE_PRECISION
    if not precision:
        precision = 2 + _DOUBLE_PRECISION * 59 // 196
    trailing = (significand & -significand).bit_length() - 1
    significand >>= trailing
    exp += trailing
    if exp > 0:
        significand <<= exp
        exp = 0
    elif exp < 0:
        significand *= 5 ** (-exp)
    bits_required = (precision * 196 + 58) // 59
    bits = significand.bit_length()
    if bits > bits_required:
        tens = (bits - bits_required) * 59 // 196
        if tens:
            exp += tens
            significand //= 10 ** tens
    raw = str(significand)
    digits = raw.rstrip("0")
    exp += len(raw) - len(digits)
    digits, exp = _round_digits(digits, exp, precision)
    n = len(digits)
    if not max_padding:
        scientific = True
    elif exp >= 0:
        scientific = exp > max_padding or n + exp > precision
    else:
        msd = exp + n - 1
        scientific = msd < 0 and -msd > max_padding
    if scientific:
        exp10 = exp + n - 1
        text = digits[0] + "." + ("0" if n == 1 and truncate_zero else digits[1:])
        if not truncate_zero and precision > n - 1:
            text += "0" * (precision - n + 1)
        exp_digits = str(abs(exp10))
        if not truncate_zero and len(exp_digits) < 2:
            exp_digits = "0" + exp_digits
        return f"{sign}{text}{'E' if truncate_zero else 'e'}{'+' if exp10 >= 0 else '-'}{exp_digits}"
    if exp >= 0:
        return sign + digits + "0" * exp
    whole = exp + n
    if whole > 0:
        return f"{sign}{digits[:whole]}.{digits[whole:]}"
    return f"{sign}0.{'0' * -whole}{digits}"


def format_float(value: float) -> str:
    """A double as MLIR prints a FloatAttr or a quant scale."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"cannot print non-finite float {value} (MLIR would use a hex literal)")
    short = apfloat_to_string(value, 6, 0, False)
    if float(short) == value and math.copysign(1.0, float(short)) == math.copysign(1.0, value):
        return short
    full = apfloat_to_string(value)
    if "." in full:
        return full
    # Integral values with more digits than the 6-digit form holds: MLIR falls back to the bit pattern.
    return "0x" + format(struct.unpack("<Q", struct.pack("<d", value))[0], "X")


def format_attr(value: AttrValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, I64):
        return f"{value.value} : i64"
    if isinstance(value, SI32):
        return f"{value.value} : si32"
    if isinstance(value, F64):
        return f"{format_float(value.value)} : f64"
    if isinstance(value, list):
        return "[" + ", ".join(_array_element(v) for v in value) + "]"
    raise TypeError(f"unsupported attribute value {value!r}")


def _array_element(value: AttrValue) -> str:
    """Inside an ArrayAttr MLIR elides the type of i64 integers and (non-hex) f64 floats."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, F64):
        text = format_float(value.value)
        return text if not text.startswith(("0x", "-0x")) else f"{text} : f64"
    return format_attr(value)


def format_attr_dict(attrs: dict[str, AttrValue]) -> str:
    """``{a = 1, b = 2}`` sorted by name as MLIR's DictionaryAttr stores it; '' when empty."""
    if not attrs:
        return ""
    return "{" + ", ".join(f"{key} = {format_attr(attrs[key])}" for key in sorted(attrs)) + "}"


def _quant_params(scale: float, zero_point: int) -> str:
    return format_float(scale) + (f":{zero_point}" if zero_point else "")


def format_element(dtype: str, quant: Quant | None) -> str:
    if quant is None:
        return DTYPES[dtype][1]
    storage = DTYPES[dtype][2]
    if quant.axis is None:
        return f"!quant.uniform<{storage}:f32, {_quant_params(quant.scales[0], quant.zero_points[0])}>"
    params = ",".join(_quant_params(s, z) for s, z in zip(quant.scales, quant.zero_points, strict=False))
    return f"!quant.uniform<{storage}:f32:{quant.axis}, {{{params}}}>"


def format_type(ttype: TensorType) -> str:
    if ttype.dtype == "none":
        return "none"
    element = format_element(ttype.dtype, ttype.quant)
    if ttype.shape is None:
        return f"tensor<*x{element}>"
    if not ttype.shape:
        return f"tensor<{element}>"
    return "tensor<" + "x".join(str(d) for d in ttype.shape) + "x" + element + ">"


def format_string(text: str) -> str:
    """A quoted string as LLVM's printEscapedString writes it: printable ASCII as is, every other UTF-8 byte
    (and ``"`` and ``\\``) as ``\\XX`` in upper-case hex."""
    out = []
    for byte in text.encode("utf-8"):
        if 0x20 <= byte <= 0x7E and byte not in (0x22, 0x5C):
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:02X}")
    return '"' + "".join(out) + '"'
