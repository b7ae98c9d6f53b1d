"""Zero-copy reader of TFLite model files (``TFL3`` flatbuffers), Edge TPU compiled or not.

``load_model`` parses the model table, subgraph 0 (its tensors, operators, inputs and outputs), the operator
codes and the buffer table. Tensor data and custom options stay views into the file bytes, which the model
keeps alive in ``model.data``. Every offset and length is checked first; anything malformed raises
``ModelFormatError`` naming the file and the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.formats.builtin_options import decode_builtin_options
from libredgetpu_ros.formats.flatbuf import Buffer, Span, Table
from libredgetpu_ros.formats.flex import decode_flexbuffer
from libredgetpu_ros.formats.tflite_schema import (
    CUSTOM,
    EDGETPU_CUSTOM_CODE,
    RAW_BYTES,
    TENSOR_TYPES,
    builtin_name,
    tensor_type_name,
)

# The largest model file read (flatbuffers cap a file at 2 GiB; the largest published Edge TPU models are
# tens of MB). Templates use a smaller cap (robotics/template.py, matmul/template.py).
MAX_MODEL_BYTES = 512 * 1024 * 1024

if TYPE_CHECKING:
    from libredgetpu_ros.formats.darwinn import DarwinnPackage

TFLITE_IDENTIFIER = b"TFL3"
# A tensor rank or element count beyond these is corruption, not a model (checked before any allocation).
_MAX_RANK = 16
# A compiled model has one Edge TPU op per delegated segment (1-3 in practice). Graph walks run once per
# Edge TPU op (inspect's CPU ops before/after), so their count is capped to keep those walks linear.
_MAX_EDGETPU_OPS = 256


@dataclass(frozen=True, eq=False)
class Quantization:
    """Affine quantization of a tensor: real = scale * (q - zero_point), per tensor or along one axis."""

    scale: np.ndarray  # float32, one value or one per channel
    zero_point: np.ndarray  # int64, same length as scale
    quantized_dimension: int = 0

    @property
    def per_channel(self) -> bool:
        return self.scale.size > 1

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """float32 values of quantized ``q``; per-channel parameters broadcast along quantized_dimension."""
        q = np.asarray(q)
        scale = self.scale.astype(np.float32)
        zp = self.zero_point.astype(np.float32)
        if self.per_channel:
            axis = self.quantized_dimension % max(q.ndim, 1)
            if q.ndim == 0 or q.shape[axis] != scale.size:
                raise ValueError(
                    f"per-channel quantization has {scale.size} channels but axis {axis} of the "
                    f"array is {q.shape}"
                )
            bshape = [1] * q.ndim
            bshape[axis] = scale.size
            scale, zp = scale.reshape(bshape), zp.reshape(bshape)
        return ((q.astype(np.float32) - zp) * scale).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale.tolist(),
            "zero_point": self.zero_point.tolist(),
            "quantized_dimension": self.quantized_dimension,
        }


@dataclass(frozen=True, eq=False)
class Tensor:
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype  # raw uint8 bytes for types NumPy cannot hold (STRING, INT4, ...)
    type_code: int  # TFLite TensorType
    buffer: int
    quantization: Quantization | None
    is_variable: bool = False
    shape_signature: tuple[int, ...] | None = None

    @property
    def type_name(self) -> str:
        return tensor_type_name(self.type_code)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True, eq=False)
class Operator:
    index: int
    opcode_name: str  # builtin name ("CONV_2D") or custom code ("edgetpu-custom-op")
    builtin_code: int
    custom_code: str | None
    version: int
    inputs: tuple[int, ...]  # tensor indices, -1 = optional input absent
    outputs: tuple[int, ...]
    builtin_options: dict[str, Any] = field(default_factory=dict)
    custom_options_raw: memoryview | None = None
    custom_options: dict[str, Any] | None = None  # FlexBuffers decoded; None for the Edge TPU op

    @property
    def is_edgetpu(self) -> bool:
        return self.custom_code == EDGETPU_CUSTOM_CODE

    @property
    def is_custom(self) -> bool:
        return self.builtin_code == CUSTOM


@dataclass(frozen=True)
class SubgraphLayout:
    """Byte positions inside the file of subgraph 0's fields, for tools that patch the flatbuffer in place.

    ``*_field`` is the position of the uoffset slot in the subgraph table (the vector starts at
    slot + its value); ``*_vector`` is the position of the vector's uint32 length word. See docs/formats.md.
    """

    table: int
    outputs_field: int
    outputs_vector: int
    operators_field: int
    operators_vector: int
    operators_count: int


class TfliteModel:
    """A parsed TFLite model; see the module docstring. Build it with :func:`load_model`."""

    def __init__(self, data: memoryview, path: Path | None) -> None:
        self.path = path
        self.data = data
        what = str(path) if path is not None else "model bytes"
        self._buf = Buffer(data, what)
        if len(data) < 8:
            raise self._buf.fail(f"{len(data)} bytes is too short for a TFLite model")
        if bytes(data[4:8]) != TFLITE_IDENTIFIER:
            raise self._buf.fail(
                f"not a TFLite model: identifier {bytes(data[4:8])!r} at bytes 4..8, "
                f"expected {TFLITE_IDENTIFIER!r}"
            )
        root = self._buf.root("Model")
        self.version = int(root.scalar(0, "u32", 0, "version"))
        self.description = root.string(3, "description") or ""
        self._opcodes = [
            self._read_opcode(i, t) for i, t in enumerate(root.tables(1, "OperatorCode", "operator_codes"))
        ]
        self._buffers = [self._read_buffer(i, t) for i, t in enumerate(root.tables(4, "Buffer", "buffers"))]
        subgraphs = root.tables(2, "SubGraph", "subgraphs")
        if not subgraphs:
            raise self._buf.fail("model has no subgraph")
        self.num_subgraphs = len(subgraphs)
        sg = subgraphs[0]
        self._subgraph = sg
        self.tensors: list[Tensor] = [
            self._read_tensor(i, t) for i, t in enumerate(sg.tables(0, "Tensor", "tensors"))
        ]
        self.inputs: list[int] = self._tensor_refs(sg.ints(1, "i32", "inputs"), "SubGraph.inputs")
        self.outputs: list[int] = self._tensor_refs(sg.ints(2, "i32", "outputs"), "SubGraph.outputs")
        self.operators: list[Operator] = [
            self._read_operator(i, t) for i, t in enumerate(sg.tables(3, "Operator", "operators"))
        ]
        n_edgetpu = sum(op.is_edgetpu for op in self.operators)
        if n_edgetpu > _MAX_EDGETPU_OPS:
            raise self._buf.fail(f"subgraph 0 has {n_edgetpu} edgetpu-custom-op operators "
                                 f"(at most {_MAX_EDGETPU_OPS})")
        self._producers: dict[int, Operator] = {}
        self._consumers: dict[int, list[Operator]] = {}
        for op in self.operators:
            for t in op.outputs:
                self._producers[t] = op
            for t in op.inputs:
                if t >= 0:
                    self._consumers.setdefault(t, []).append(op)
        self._packages: dict[int, DarwinnPackage] = {}

    # -- parsing -------------------------------------------------------------------------------------------
    def _read_opcode(self, i: int, t: Table) -> tuple[int, str | None, int]:
        deprecated = int(t.scalar(0, "i8", 0, "deprecated_builtin_code"))
        code = int(t.scalar(3, "i32", 0, "builtin_code"))
        # Old files only set the int8 field, new ones set both; the larger one is the real code.
        return max(deprecated, code), t.string(1, "custom_code"), int(t.scalar(2, "i32", 1, "version"))

    def _read_buffer(self, i: int, t: Table) -> Span:
        span = t.vector(0, 1, f"buffers[{i}].data")
        if span is not None and span.size:
            return span
        offset = int(t.scalar(1, "u64", 0, "offset"))
        size = int(t.scalar(2, "u64", 0, "size"))
        if (
            offset > 1
        ):  # data stored after the flatbuffer (models > 2 GB); offset 1 is the writer's placeholder
            self._buf.check(offset, size, f"buffers[{i}] external data")
            return Span(offset, size)
        return Span(0, 0)

    def _tensor_refs(self, refs: tuple[int, ...], where: str, allow_absent: bool = False) -> list[int]:
        n = len(self.tensors)
        for r in refs:
            if not (0 <= r < n or (allow_absent and r == -1)):
                raise self._buf.fail(f"{where} refers to tensor {r}; subgraph 0 has {n} tensors")
        return list(refs)

    def _read_tensor(self, i: int, t: Table) -> Tensor:
        shape = self._shape(t, 0, "shape", i)
        type_code = int(t.scalar(1, "i8", 0, "type"))
        dtype = TENSOR_TYPES.get(type_code, ("", None))[1] or RAW_BYTES
        buffer = int(t.scalar(2, "u32", 0, "buffer"))
        if buffer and buffer >= len(self._buffers):
            raise self._buf.fail(f"tensor {i}: buffer index {buffer} but the model has {len(self._buffers)}")
        name = t.string(3, "name") or ""
        quant = None
        q = t.table(4, "QuantizationParameters", "quantization")
        if q is not None:
            scale = q.array(2, "f32", "scale")
            zp = q.array(3, "i64", "zero_point")
            if scale is not None and scale.size:
                if zp is None or zp.size == 0:
                    zp = np.zeros(scale.size, np.int64)
                if zp.size != scale.size:
                    raise self._buf.fail(
                        f"tensor {i} ({name!r}): {scale.size} scales but {zp.size} zero points"
                    )
                qdim = int(q.scalar(6, "i32", 0, "quantized_dimension"))
                if scale.size > 1 and not 0 <= qdim < max(len(shape), 1):
                    raise self._buf.fail(
                        f"tensor {i} ({name!r}): quantized_dimension {qdim} for shape {shape}"
                    )
                quant = Quantization(scale, zp.astype(np.int64, copy=False), qdim)
        sig = self._shape(t, 7, "shape_signature", i, signature=True) if t.has(7) else None
        return Tensor(
            i,
            name,
            tuple(shape),
            dtype,
            type_code,
            buffer,
            quant,
            bool(t.scalar(5, "bool", False, "is_variable")),
            sig,
        )

    def _shape(self, t: Table, fid: int, label: str, i: int, signature: bool = False) -> tuple[int, ...]:
        """A tensor shape, its rank checked before its values are turned into Python ints."""
        arr = t.array(fid, "i32", label)
        if arr is None:
            return ()
        if arr.size > _MAX_RANK:
            raise self._buf.fail(f"tensor {i}: {label} of rank {arr.size} (at most {_MAX_RANK})")
        shape = tuple(arr.tolist())
        if any(d < (-1 if signature else 0) for d in shape):  # -1 = dynamic, in shape_signature only
            raise self._buf.fail(f"tensor {i}: invalid {label} {shape}")
        return shape

    def _read_operator(self, i: int, t: Table) -> Operator:
        opcode_index = int(t.scalar(0, "u32", 0, "opcode_index"))  # absent means 0, not "skip"
        if opcode_index >= len(self._opcodes):
            raise self._buf.fail(
                f"operator {i}: opcode_index {opcode_index} but the model has "
                f"{len(self._opcodes)} operator codes"
            )
        code, custom_code, version = self._opcodes[opcode_index]
        # Operators may share one opcode: its name is handed out once per operator (inspect prints it each
        # time), so it is charged per operator, or a 1 MiB custom_code shared by reference would expand.
        self._buf.charge(len(custom_code or ""), f"operator {i} custom_code")
        inputs = tuple(
            self._tensor_refs(t.ints(1, "i32", "inputs"), f"operator {i} inputs", allow_absent=True)
        )
        outputs = tuple(self._tensor_refs(t.ints(2, "i32", "outputs"), f"operator {i} outputs"))
        kind, opts = t.union(3, 4, "builtin_options")
        builtin_options = decode_builtin_options(kind, opts)
        raw = t.bytes(5, "custom_options")
        if raw is None or not len(raw):
            big_off = int(t.scalar(9, "u64", 0, "large_custom_options_offset"))
            big_size = int(t.scalar(10, "u64", 0, "large_custom_options_size"))
            if big_off > 1:
                self._buf.check(big_off, big_size, f"operator {i} large custom options")
                raw = self.data[big_off : big_off + big_size]
        if code == CUSTOM:
            name = custom_code or ""
            if not name:
                raise self._buf.fail(f"operator {i}: CUSTOM operator without a custom_code")
        else:
            name = builtin_name(code)
        custom_options = None
        if raw is not None and len(raw) and name != EDGETPU_CUSTOM_CODE and code == CUSTOM:
            custom_options = decode_flexbuffer(raw, f"{self._buf.what}: operator {i} ({name})")
            if not isinstance(custom_options, dict):
                custom_options = {"value": custom_options}
        return Operator(
            i,
            name,
            code,
            custom_code if code == CUSTOM else None,
            version,
            inputs,
            outputs,
            builtin_options,
            raw if raw is not None and len(raw) else None,
            custom_options,
        )

    # -- queries --------------------------------------------------------------------------------------------
    def tensor_by_name(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise ModelFormatError(f"{self._buf.what}: no tensor named {name!r}")

    def buffer_bytes(self, index: int) -> memoryview:
        span = self._buffers[index] if 0 <= index < len(self._buffers) else Span(0, 0)
        return self.data[span.start : span.start + span.size]

    def buffer_data(self, tensor: Tensor) -> np.ndarray | None:
        """The tensor's constant data as a read-only view into ``model.data`` (None when it has none)."""
        if not tensor.buffer:
            return None
        span = self._buffers[tensor.buffer]
        if not span.size:
            return None
        if TENSOR_TYPES.get(tensor.type_code, ("", None))[1] is None:
            return np.frombuffer(self.data, RAW_BYTES, span.size, span.start)
        count = math.prod(tensor.shape)
        if count * tensor.dtype.itemsize != span.size:
            raise ModelFormatError(
                f"{self._buf.what}: tensor {tensor.index} ({tensor.name!r}) of shape "
                f"{tensor.shape} {tensor.type_name} needs {count * tensor.dtype.itemsize} bytes, "
                f"its buffer {tensor.buffer} holds {span.size}"
            )
        return np.frombuffer(self.data, tensor.dtype, count, span.start).reshape(tensor.shape)

    def producer(self, tensor_index: int) -> Operator | None:
        return self._producers.get(tensor_index)

    def consumers(self, tensor_index: int) -> list[Operator]:
        return list(self._consumers.get(tensor_index, ()))

    def edgetpu_ops(self) -> list[Operator]:
        return [op for op in self.operators if op.is_edgetpu]

    def cpu_ops(self) -> list[Operator]:
        return [op for op in self.operators if not op.is_edgetpu]

    def cpu_ops_after(self, op: Operator) -> list[Operator]:
        """CPU operators that (transitively) consume the outputs of ``op``, in graph order."""
        return [o for o in self._reachable(op, downstream=True) if not o.is_edgetpu]

    def cpu_ops_before(self, op: Operator) -> list[Operator]:
        """CPU operators whose outputs (transitively) feed ``op``, in graph order."""
        return [o for o in self._reachable(op, downstream=False) if not o.is_edgetpu]

    def _reachable(self, op: Operator, downstream: bool) -> list[Operator]:
        # Walk tensors, each once: walking ops alone re-read a tensor's whole consumer list from every op
        # touching it (quadratic per walk when many ops share a tensor; a crafted file hung inspect).
        seen: set[int] = set()
        seen_tensors: set[int] = set()
        stack = [op]
        while stack:
            cur = stack.pop()
            for t in cur.outputs if downstream else cur.inputs:
                if t < 0 or t in seen_tensors:
                    continue
                seen_tensors.add(t)
                if downstream:
                    nxt: Iterable[Operator] = self._consumers.get(t, ())
                else:
                    producer = self._producers.get(t)
                    nxt = () if producer is None else (producer,)
                for o in nxt:
                    if o.index not in seen and o.index != op.index:
                        seen.add(o.index)
                        stack.append(o)
        return [self.operators[i] for i in sorted(seen)]

    def darwinn(self, op: Operator) -> DarwinnPackage:
        """The DarwiNN package carried in an ``edgetpu-custom-op``'s custom options (parsed once, cached)."""
        from libredgetpu_ros.formats.darwinn import read_package

        if not op.is_edgetpu:
            raise ModelFormatError(
                f"{self._buf.what}: operator {op.index} ({op.opcode_name}) is not an Edge TPU op"
            )
        if op.custom_options_raw is None:
            raise ModelFormatError(f"{self._buf.what}: Edge TPU operator {op.index} has no custom options")
        if op.index not in self._packages:
            self._packages[op.index] = read_package(
                op.custom_options_raw, f"{self._buf.what}: operator {op.index} DarwiNN package"
            )
        return self._packages[op.index]

    @cached_property
    def is_edgetpu(self) -> bool:
        return any(op.is_edgetpu for op in self.operators)

    def subgraph_layout(self) -> SubgraphLayout:
        """Where subgraph 0's ``outputs`` and ``operators`` vectors live in the file (for in-place cuts)."""
        sg = self._subgraph
        out_field, ops_field = sg.field_pos(2), sg.field_pos(3)
        if not out_field or not ops_field:
            raise ModelFormatError(f"{self._buf.what}: subgraph 0 has no outputs or operators vector")
        out_span = sg.vector(2, 4, "outputs")
        ops_span = sg.vector(3, 4, "operators")
        assert out_span is not None and ops_span is not None
        return SubgraphLayout(
            sg.pos, out_field, out_span.start - 4, ops_field, ops_span.start - 4, ops_span.size // 4
        )


def load_model(source: str | Path | bytes | bytearray | memoryview,
               max_bytes: int = MAX_MODEL_BYTES) -> TfliteModel:
    """Parse a ``.tflite`` file (path) or its bytes; raise ModelFormatError on anything malformed. A path
    must be a regular file of at most ``max_bytes``, checked before reading (paths.read_regular), so a huge
    or endless file is refused from its size instead of being read whole first."""
    if isinstance(source, (str, Path)):
        from libredgetpu_ros.paths import read_regular

        path = Path(source)
        return TfliteModel(memoryview(read_regular(path, "model", max_bytes, ModelFormatError)), path)
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        return TfliteModel(view, None)
    raise TypeError(f"load_model expects a path or bytes, got {type(source).__name__}")
