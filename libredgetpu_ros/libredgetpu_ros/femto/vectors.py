"""Vectors for the SPU: quantization, padding, 64-bit word packing, and femtorun's own padding behaviour.

Two sets of helpers:

- what this package uses (:func:`quantize`, :func:`dequantize`, :func:`prepare_input`): values are checked
  (finite, exactly ``length`` elements) and failures are :class:`IOSpecError` naming the vector;
- femtorun 4.1.2's ``FemtoRunner`` padding, reproduced for conformance (:func:`femtorun_pad`,
  :func:`femtorun_unpad`): zero fill to ``padded_length`` keeping the dtype, no length check, a numpy
  broadcast error for long vectors, TypeError for a null ``padded_length``, ValueError for float outputs.

:class:`VectorSpec` is one vector of an IOSpec (``femto/iospec.py`` reads the file and builds them).

Word counts: femtodriver writes ``length_64b_words = (padded_length + 3) // 4`` whatever the precision;
packing gives ``ceil(n * precision / 64)`` words. They differ for 8-bit vectors (see docs/femto.md);
:func:`pack_words` is the packing (element 0 in the low bits of word 0, two's complement).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from libredgetpu_ros.errors import IOSpecError

_CONTAINERS = ((8, np.int8), (16, np.int16), (32, np.int32), (64, np.int64))


@dataclass(frozen=True)
class VectorSpec:
    """One input or output vector. ``key`` is the YAML key (graph node), ``name`` the varname sends use."""

    key: Any
    name: str
    direction: str                 # "input" | "output" (the section it is in)
    length: int
    precision: int
    padded_length: int | None
    scale: float | None            # None when missing / not a finite positive number
    zero_point: float | None
    latch_hint: bool | None        # comments: {latch: ...} as fmot/femtodriver write it
    length_64b_words: Any = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def target_length(self) -> int:
        """What the SPU handles: ``padded_length``, or ``length`` when it is null."""
        return self.length if self.padded_length is None else self.padded_length


def int_dtype(precision: int) -> np.dtype:
    """The smallest signed NumPy integer holding ``precision`` bits."""
    for bits, dtype in _CONTAINERS:
        if precision <= bits:
            return np.dtype(dtype)
    raise IOSpecError(f"precision {precision} is above 64 bits", key="precision", value=precision)


def int_range(precision: int) -> tuple[int, int]:
    return -(1 << (precision - 1)), (1 << (precision - 1)) - 1


def words_femtodriver(padded_length: int) -> int:
    """femtodriver 2.6.0's ``length_64b_words`` (the same for 8- and 16-bit vectors)."""
    return (padded_length + 3) // 4


def words_packed(n: int, precision: int) -> int:
    """64-bit words that ``n`` elements of ``precision`` bits take when packed (femtodriver's ``pack_V``)."""
    return -(-n * precision // 64)


def quantize(values: np.ndarray, vec: VectorSpec) -> np.ndarray:
    """Real values -> integers with the vector's scale / zero point, rounded and saturated to its precision.

    Non-finite values are an error (naming the vector and the first bad index), never a silent clip."""
    x = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise IOSpecError(f"input {vec.name!r}: element {i} is {x[i]} (values must be finite)",
                          key=f"{vec.name}[{i}]", value=float(x[i]))
    scale = 1.0 if vec.scale is None else vec.scale
    lo, hi = int_range(vec.precision)
    q = np.rint(x / scale + (vec.zero_point or 0.0))
    np.clip(q, lo, hi, out=q)
    return q.astype(int_dtype(vec.precision))


def dequantize(q: np.ndarray, vec: VectorSpec) -> np.ndarray:
    scale = 1.0 if vec.scale is None else vec.scale
    return (np.asarray(q, dtype=np.float64) - (vec.zero_point or 0.0)) * scale


def check_length(values: np.ndarray, vec: VectorSpec) -> np.ndarray:
    """A 1-D vector of exactly ``length`` elements (what the model was traced with)."""
    x = np.asarray(values)
    if x.ndim != 1 or x.shape[0] != vec.length:
        raise IOSpecError(f"input {vec.name!r}: expected {vec.length} values, got shape {x.shape}",
                          key=f"{vec.name}.length", value=tuple(x.shape))
    return x


def pad(q: np.ndarray, target_length: int) -> np.ndarray:
    """Zero-fill a 1-D vector to ``target_length`` (dtype kept); the input must not be longer."""
    if q.shape[0] == target_length:
        return q
    out = np.zeros(target_length, dtype=q.dtype)
    out[: q.shape[0]] = q
    return out


def prepare_input(values: np.ndarray, vec: VectorSpec) -> np.ndarray:
    """Real values of ``length`` elements -> the quantized, padded integer vector the SPU takes."""
    return pad(quantize(check_length(values, vec), vec), vec.target_length)


def femtorun_pad(values: np.ndarray, length: int, padded_length: int | None) -> np.ndarray:
    """femtorun ``FemtoRunner._pad_inputs`` for one 1-D vector (pad=True)."""
    if padded_length is None:
        raise IOSpecError("padded_length is null: 'NoneType' object cannot be interpreted as an integer",
                          kind="TypeError", femtorun_message="'NoneType' object cannot be interpreted as an "
                          "integer", key="padded_length", value=None)
    v = np.asarray(values)
    if v.shape[0] > padded_length:
        msg = f"could not broadcast input array from shape ({v.shape[0]},) into shape ({padded_length},)"
        raise IOSpecError(f"vector longer than padded_length: {msg}", kind="ValueError", femtorun_message=msg,
                          key="padded_length", value=padded_length)
    return pad(v, padded_length)


def femtorun_unpad(values: np.ndarray, length: int) -> np.ndarray:
    """femtorun ``FemtoRunner.recv_outputs`` for one 1-D output (pad=True): floats refused, cut to length."""
    v = np.atleast_1d(np.asarray(values))
    if not np.issubdtype(v.dtype, np.integer):
        raise IOSpecError(f"output of dtype {v.dtype}: FemtoRunner cannot return float", kind="ValueError",
                          femtorun_message="FemtoRunner cannot return float", key="dtype", value=str(v.dtype))
    return v[:length]


def pack_words(q: np.ndarray, precision: int) -> np.ndarray:
    """Pack 8- or 16-bit elements into little-endian 64-bit words (element 0 in the low bits of word 0)."""
    if precision not in (8, 16):
        raise IOSpecError(f"cannot pack precision {precision} (8 or 16)", key="precision", value=precision)
    per_word = 64 // precision
    q = np.asarray(q)
    if q.ndim != 1 or q.shape[0] % per_word:
        raise IOSpecError(f"cannot pack {q.shape} elements of {precision} bits into 64-bit words: the count "
                          f"must be a multiple of {per_word}", key="length", value=tuple(q.shape))
    return np.ascontiguousarray(q.astype(f"<i{precision // 8}")).view("<u8")


def unpack_words(words: np.ndarray, precision: int, n: int | None = None) -> np.ndarray:
    """Inverse of :func:`pack_words`; ``n`` trims to a vector's length."""
    if precision not in (8, 16):
        raise IOSpecError(f"cannot unpack precision {precision} (8 or 16)", key="precision", value=precision)
    out = np.ascontiguousarray(np.asarray(words, dtype="<u8")).view(f"<i{precision // 8}")
    return out if n is None else out[:n]
