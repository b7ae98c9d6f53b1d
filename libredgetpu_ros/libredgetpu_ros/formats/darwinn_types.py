"""The structures a DarwiNN package is read into (executable.fbs names); the reader is ``darwinn.py``."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ModelFormatError


class ExecutableType(enum.IntEnum):
    STAND_ALONE = 0
    PARAMETER_CACHING = 1
    EXECUTION_ONLY = 2


class DataType(enum.IntEnum):
    """DarwiNN layer data types (executable.fbs ``DataType``)."""

    FIXED_POINT8 = 0
    FIXED_POINT16 = 1
    SIGNED_FIXED_POINT32 = 2
    BFLOAT = 3
    HALF = 4
    SINGLE = 5
    SIGNED_FIXED_POINT8 = 8
    SIGNED_FIXED_POINT16 = 9


_DATA_TYPE_SIZE = {0: 1, 1: 2, 2: 4, 3: 2, 4: 2, 5: 4, 8: 1, 9: 2}
_SIGNED = {DataType.SIGNED_FIXED_POINT8, DataType.SIGNED_FIXED_POINT16}  # libedgetpu's sign-flip set
@dataclass(frozen=True)
class FieldOffset:
    """A bit position in an instruction chunk that the driver patches with a base address at link time."""

    desc: str  # "output" | "input" | "parameter" | "scratch"
    name: str | None  # layer name for input/output
    batch: int
    upper_32bit: bool
    offset_bit: int


@dataclass(frozen=True, eq=False)
class InstructionBitstream:
    data: memoryview
    field_offsets: list[FieldOffset]


@dataclass(frozen=True)
class DmaHint:
    kind: str  # "descriptor" | "instruction" | "interrupt" | "fence"
    direction: str  # "infeed" (host -> device) | "outfeed"
    buffer_type: str | None = None  # descriptors: "input" | "output" | "parameter" | "scratch"
    layer_name: str | None = None
    offset: int = 0
    size: int = 0
    batch: int = 0
    chunk_index: int | None = None  # instruction hints
    interrupt_type: int | None = None  # interrupt hints: SCALAR_CORE_INT_0..3

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "direction": self.direction}
        if self.kind == "descriptor":
            d.update(
                buffer_type=self.buffer_type, layer_name=self.layer_name, offset=self.offset, size=self.size
            )
        elif self.kind == "instruction":
            d["chunk_index"] = self.chunk_index
        elif self.kind == "interrupt":
            d["interrupt_type"] = self.interrupt_type
        return d


@dataclass(frozen=True, eq=False)
class OutputLayout:
    """Per-coordinate maps from a dense (y, x) position to the device's tiled output (executable.fbs)."""

    y_coordinate_to_linear_tile_id_map: np.ndarray
    x_coordinate_to_linear_tile_id_map: np.ndarray
    linearized_tile_byte_offset: np.ndarray
    x_coordinate_to_local_byte_offset: np.ndarray
    y_coordinate_to_local_y_offset: np.ndarray
    x_coordinate_to_local_y_row_size: np.ndarray


@dataclass(frozen=True, eq=False)
class SliceLayout:
    """One ``OutputShapeInfo`` slice: inclusive (start, end) per dimension, element strides, byte offset."""

    ranges: tuple[tuple[int, int], ...]
    stride: tuple[int, ...]
    offset: int


@dataclass(frozen=True, eq=False)
class Layer:
    name: str
    size_bytes: int  # padded, for batch 1
    shape: tuple[int, int, int, int]  # (batch, y, x, z)
    zero_point: int
    dequant_factor: float
    data_type: DataType | int
    execution_count_per_inference: int = 1
    cache_on_dram: bool = False
    tensor_shape: tuple[tuple[int, int], ...] = ()  # Layer.shape ranges when present
    output_layout: OutputLayout | None = None  # output layers only
    slices: tuple[SliceLayout, ...] = ()  # OutputShapeInfo slices, output layers only

    @property
    def y_dim(self) -> int:
        return self.shape[1]

    @property
    def x_dim(self) -> int:
        return self.shape[2]

    @property
    def z_dim(self) -> int:
        return self.shape[3]

    @property
    def data_type_name(self) -> str:
        return self.data_type.name if isinstance(self.data_type, DataType) else f"DATA_TYPE_{self.data_type}"

    @property
    def element_size(self) -> int:
        return _DATA_TYPE_SIZE.get(int(self.data_type), 1)

    @property
    def signed(self) -> bool:
        return self.data_type in _SIGNED

    @property
    def actual_size_bytes(self) -> int:
        """Unpadded bytes of one inference: y * x * z * element size."""
        return self.y_dim * self.x_dim * self.z_dim * self.element_size

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "size_bytes": self.size_bytes,
            "shape": list(self.shape),
            "data_type": self.data_type_name,
            "zero_point": self.zero_point,
            "dequant_factor": self.dequant_factor,
            "execution_count_per_inference": self.execution_count_per_inference,
            "cache_on_dram": self.cache_on_dram,
            "tiled": self.output_layout is not None,
        }


@dataclass(frozen=True, eq=False)
class Executable:
    type: ExecutableType
    name: str
    parameter_caching_token: int
    batch_size: int
    scratch_size: int
    chip: str
    instruction_bitstreams: list[InstructionBitstream]
    parameters: memoryview
    dma_hints: list[DmaHint]
    dma_hints_fully_deterministic: bool
    input_layers: list[Layer]
    output_layers: list[Layer]
    version: int = 0
    estimated_cycles: int = 0
    used_narrow_memory_bytes_per_tile: int = 0
    use_tpu_dram_for_parameters: bool = False
    data: memoryview = field(default=memoryview(b""), repr=False)  # the executable flatbuffer itself

    def input_layer(self, name: str) -> Layer:
        return _layer_named(self.input_layers, name, "input")

    def output_layer(self, name: str) -> Layer:
        return _layer_named(self.output_layers, name, "output")


def _layer_named(layers: list[Layer], name: str, kind: str) -> Layer:
    for layer in layers:
        if layer.name == name:
            return layer
    raise ModelFormatError(f"no {kind} layer named {name!r} (have {[la.name for la in layers]})")


@dataclass(frozen=True, eq=False)
class DarwinnPackage:
    executables: list[Executable]
    min_runtime_version: int = 0
    compiler_version: str = ""
    keypair_version: int = 0
    virtual_chip_id: int = 0
    model_identifier: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # the other keys of the custom options map

    def by_type(self, kind: ExecutableType) -> Executable | None:
        for exe in self.executables:
            if exe.type == kind:
                return exe
        return None

    @property
    def parameter_caching(self) -> Executable | None:
        return self.by_type(ExecutableType.PARAMETER_CACHING)

    @property
    def execution_only(self) -> Executable | None:
        return self.by_type(ExecutableType.EXECUTION_ONLY)

    @property
    def stand_alone(self) -> Executable | None:
        return self.by_type(ExecutableType.STAND_ALONE)

    @property
    def runnable(self) -> Executable:
        """The executable that runs an inference: EXECUTION_ONLY if cached, else STAND_ALONE."""
        exe = self.execution_only or self.stand_alone
        if exe is None:
            raise ModelFormatError(
                "DarwiNN package has neither an EXECUTION_ONLY nor a STAND_ALONE executable"
            )
        return exe
