"""The in-memory form of one Top-dialect module: what the builder produces, the emitter prints, the parser
reads back and the executor runs.

Attribute values keep MLIR's integer/float widths because they are printed differently (``1 : i64``,
``1 : si32``, ``-1.000000e+00 : f64``); a plain ``int`` list is an untyped i64 ``ArrayAttr`` (``[1, 1]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from libredgetpu_ros.errors import InputError
from libredgetpu_ros.textdata import clip_repr


class TpuLangError(InputError):
    """A TpuLang graph, op argument, MLIR file or weight file is wrong; the message names the op/argument."""


@dataclass(frozen=True)
class I64:
    value: int


@dataclass(frozen=True)
class SI32:
    value: int


@dataclass(frozen=True)
class F64:
    value: float


AttrValue = bool | str | I64 | SI32 | F64 | list

# TpuLang dtype name -> (numpy dtype, MLIR element type when not quantized, quant storage type)
DTYPES: dict[str, tuple[np.dtype, str, str | None]] = {
    "float32": (np.dtype(np.float32), "f32", None),
    "float16": (np.dtype(np.float16), "f16", None),
    "int8": (np.dtype(np.int8), "si8", "i8"),
    "uint8": (np.dtype(np.uint8), "ui8", "u8"),
    "int16": (np.dtype(np.int16), "si16", "i16"),
    "uint16": (np.dtype(np.uint16), "ui16", "u16"),
    "int32": (np.dtype(np.int32), "si32", "i32"),
    "uint32": (np.dtype(np.uint32), "ui32", "u32"),
}
ELEMENT_TO_DTYPE = {mlir: name for name, (_, mlir, _) in DTYPES.items()}
STORAGE_TO_DTYPE = {storage: name for name, (_, _, storage) in DTYPES.items() if storage}


def check_dtype(dtype: str, where: str) -> np.dtype:
    """numpy dtype of a TpuLang dtype name; TpuLangError naming ``where`` otherwise."""
    if dtype not in DTYPES:
        raise TpuLangError(f"{where}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[dtype][0]


@dataclass(frozen=True)
class Quant:
    """Uniform quantization: one (scale, zero point) or one per index of ``axis``."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int | None = None  # None: per tensor

    def scale_array(self, ndim: int) -> np.ndarray:
        return self._broadcast(np.asarray(self.scales, dtype=np.float64), ndim)

    def zp_array(self, ndim: int) -> np.ndarray:
        return self._broadcast(np.asarray(self.zero_points, dtype=np.int64), ndim)

    def _broadcast(self, values: np.ndarray, ndim: int) -> np.ndarray:
        if self.axis is None or values.size == 1:
            return values.reshape(())
        shape = [1] * ndim
        shape[self.axis] = values.size
        return values.reshape(shape)


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...] | None  # None: unranked (``tensor<*x...>``)
    dtype: str  # a key of DTYPES
    quant: Quant | None = None

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype][0]

    def unranked(self) -> TensorType:
        return TensorType(None, self.dtype, self.quant)


NONE_TYPE = TensorType(None, "none")


@dataclass
class OpNode:
    """One op of the function body: ``top.Input`` / ``top.Weight`` / a compute op (not ``top.None``)."""

    kind: str  # "top.Conv"
    name: str  # its loc("...") name = the tensor name
    operands: tuple[str | None, ...]  # names of the values used; None = the top.None value
    attrs: dict[str, AttrValue]
    result: TensorType
    arg_index: int | None = None  # top.Input: which function argument


@dataclass
class Module:
    name: str
    state: str  # TOP_F32 | TOP_QUANTIZED
    weight_file: str
    inputs: list[tuple[str, TensorType]]  # function arguments (ranked)
    ops: list[OpNode]  # in print order: inputs, then weights just before their first user
    outputs: list[str]
    chip: str = "ALL"
    platform: str = "TPULANG"
    run_mode: str = "STATIC"
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # inferred shapes (builder only)

    def op(self, name: str) -> OpNode:
        for node in self.ops:
            if node.name == name:
                return node
        raise TpuLangError(f"module {self.name}: no value named {clip_repr(name)}")

    def weights(self) -> list[OpNode]:
        return [node for node in self.ops if node.kind == "top.Weight"]


def weight_file_name(name: str, state: str, chip: str = "ALL") -> str:
    """TpuLang's origin weight file name, ``<name>_<state>_<chip>_origin_weight.npz`` lower-cased."""
    return f"{name}_{state}_{chip}_origin_weight.npz".lower()
