"""Reader of DarwiNN packages: the custom options of an ``edgetpu-custom-op``.

Schema facts from libedgetpu ``executable/executable.fbs`` (file identifier ``DWN1``): a ``Package`` holds a
serialized ``MultiExecutable`` whose ``serialized_executables`` strings are each an ``Executable`` flatbuffer
(STAND_ALONE, or a PARAMETER_CACHING + EXECUTION_ONLY pair sharing a ``parameter_caching_token``).
An executable carries instruction bitstream chunks, the parameter blob, the ordered DMA hints that say
what to send and read in which order, and the input/output layers with their numerics and output tile layout.

The custom options themselves are a FlexBuffers map; the package is the string under key ``"4"``.

Everything stays a view into the caller's bytes: ``Executable.parameters`` and the bitstreams are memoryview
slices of the model file.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.formats.darwinn_types import (
    _DATA_TYPE_SIZE,
    DarwinnPackage,
    DataType,
    DmaHint,
    Executable,
    ExecutableType,
    FieldOffset,
    InstructionBitstream,
    Layer,
    OutputLayout,
    SliceLayout,
)
from libredgetpu_ros.formats.flatbuf import Buffer, Table
from libredgetpu_ros.formats.flex import decode_flexbuffer

__all__ = [
    "DarwinnPackage", "DataType", "DmaHint", "Executable", "ExecutableType", "FieldOffset",
    "InstructionBitstream", "Layer", "OutputLayout", "SliceLayout", "read_package",
]

DARWINN_IDENTIFIER = b"DWN1"
_PACKAGE_KEY = "4"  # key of the package string in the edgetpu-custom-op FlexBuffers map


_DESCRIPTIONS = (
    "output",
    "input",
    "parameter",
    "scratch",
)  # Meta.desc: BASE_ADDRESS_{OUTPUT,INPUT}_ACTIVATION, ...
_DIRECTIONS = ("infeed", "outfeed")
_HINT_KINDS = {1: "descriptor", 2: "instruction", 3: "interrupt", 4: "fence"}
# Limits far above any real model: a larger claimed value is corruption, refused before sizing anything.
# Activations are not stored in the file, so their sizes cannot be checked against it; they are checked for
# consistency (dims vs size_bytes, DMA hints inside their layer) and capped. The largest layer of the
# fixtures is 0.9 MB; a 4K RGB input would be 25 MB.
_MAX_DIM = 1 << 20
_MAX_LAYER_BYTES = 64 << 20
_MAX_ACTIVATION_BYTES = 256 << 20  # all input and output layers of one executable, all batches


def read_package(data: bytes | bytearray | memoryview, what: str = "DarwiNN package") -> DarwinnPackage:
    """Parse a DarwiNN package zero-copy; raise ModelFormatError naming what is malformed.

    ``data`` is either the ``edgetpu-custom-op`` custom options (a FlexBuffers map whose key ``"4"`` holds the
    package; the other keys go to ``DarwinnPackage.options``) or a bare ``DWN1`` package.
    """
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    options: dict[str, Any] = {}
    if len(view) < 8 or bytes(view[4:8]) != DARWINN_IDENTIFIER:
        wrapper = decode_flexbuffer(view, what, keep_views=True)
        if not isinstance(wrapper, dict) or not isinstance(wrapper.get(_PACKAGE_KEY), memoryview):
            keys = sorted(wrapper) if isinstance(wrapper, dict) else type(wrapper).__name__
            raise ModelFormatError(
                f"{what}: Edge TPU custom options carry no DarwiNN package under key "
                f"{_PACKAGE_KEY!r} (found {keys})"
            )
        view = wrapper.pop(_PACKAGE_KEY)
        options = {
            k: (str(v, "utf-8", errors="replace") if isinstance(v, memoryview) else v)
            for k, v in wrapper.items()
        }
    buf = Buffer(view, what)
    root = buf.root("Package", DARWINN_IDENTIFIER)
    multi_bytes = root.bytes(1, "serialized_multi_executable")
    if multi_bytes is None or len(multi_bytes) < 8:
        raise buf.fail("Package.serialized_multi_executable is missing or too short")
    multi = Buffer(multi_bytes, f"{what}: MultiExecutable").root("MultiExecutable")
    blobs = multi.byte_vectors(0, "serialized_executables")
    if not blobs:
        raise buf.fail("MultiExecutable has no executables")
    executables = [_read_executable(b, f"{what}: executable {i}") for i, b in enumerate(blobs)]
    return DarwinnPackage(
        executables=executables,
        min_runtime_version=int(root.scalar(0, "i32", 0, "min_runtime_version")),
        compiler_version=root.string(4, "compiler_version") or "",
        keypair_version=int(root.scalar(3, "i32", 0, "keypair_version")),
        virtual_chip_id=int(root.scalar(5, "i32", 0, "virtual_chip_id")),
        model_identifier=root.string(7, "model_identifier") or "",
        options=options,
    )


def _read_executable(data: memoryview, what: str) -> Executable:
    buf = Buffer(data, what)
    t = buf.root("Executable")
    type_code = int(t.scalar(13, "i16", 0, "type"))
    try:
        kind = ExecutableType(type_code)
    except ValueError:
        raise buf.fail(
            f"Executable.type {type_code} is not STAND_ALONE/PARAMETER_CACHING/EXECUTION_ONLY"
        ) from None
    batch = int(t.scalar(3, "i32", 0, "batch_size"))
    if not 0 <= batch <= _MAX_DIM:
        raise buf.fail(f"Executable.batch_size {batch} is out of range")
    bitstreams = [
        InstructionBitstream(
            ib.bytes(0, "bitstream") or memoryview(b""),
            [_read_field_offset(f) for f in ib.tables(1, "FieldOffset", "field_offsets")],
        )
        for ib in t.tables(5, "InstructionBitstream", "instruction_bitstreams")
    ]
    hints: list[DmaHint] = []
    deterministic = False
    dh = t.table(7, "DmaHints", "dma_hints")
    if dh is not None:
        hints = [_read_hint(h, buf, len(bitstreams)) for h in dh.tables(0, "DmaHint", "hints")]
        deterministic = bool(dh.scalar(1, "bool", False, "fully_deterministic"))
    scratch = int(t.scalar(4, "i32", 0, "scratch_size_bytes"))
    if scratch < 0:
        raise buf.fail(f"Executable.scratch_size_bytes {scratch} is negative")
    inputs = [_read_layer(la, buf, batch, "input") for la in t.tables(8, "Layer", "input_layers")]
    outputs = [_read_layer(la, buf, batch, "output") for la in t.tables(9, "Layer", "output_layers")]
    total = sum(la.size_bytes for la in inputs + outputs) * max(batch, 1)
    if total > _MAX_ACTIVATION_BYTES:
        raise buf.fail(f"input + output layers hold {total} bytes (size_bytes x batch_size), more than "
                       f"the {_MAX_ACTIVATION_BYTES} an executable may move")
    parameters = t.bytes(6, "parameters") or memoryview(b"")
    _check_hints(hints, inputs, outputs, len(parameters), max(batch, 1), buf)
    return Executable(
        type=kind,
        name=t.string(1, "name") or "",
        parameter_caching_token=int(t.scalar(14, "u64", 0, "parameter_caching_token")),
        batch_size=batch,
        scratch_size=scratch,
        chip=t.string(10, "chip") or "",
        instruction_bitstreams=bitstreams,
        parameters=parameters,
        dma_hints=hints,
        dma_hints_fully_deterministic=deterministic,
        input_layers=inputs,
        output_layers=outputs,
        version=int(t.scalar(0, "i32", 0, "version")),
        estimated_cycles=int(
            t.scalar(16, "i64", 0, "estimated_cycles_64bit") or t.scalar(11, "i32", 0, "estimated_cycles")
        ),
        used_narrow_memory_bytes_per_tile=int(t.scalar(12, "i32", 0, "used_narrow_memory_bytes_per_tile")),
        use_tpu_dram_for_parameters=bool(t.scalar(15, "bool", False, "use_tpu_dram_for_parameters")),
        data=data,
    )


def _read_meta(meta: Table | None) -> tuple[str, str | None, int, bool]:
    if meta is None:
        return "output", None, 0, False
    desc = int(meta.scalar(0, "i16", 0, "desc"))
    desc_name = _DESCRIPTIONS[desc] if 0 <= desc < len(_DESCRIPTIONS) else f"desc_{desc}"
    return (
        desc_name,
        meta.string(2, "name"),
        int(meta.scalar(1, "i32", 0, "batch")),
        int(meta.scalar(3, "i16", 0, "position")) == 1,
    )


def _read_field_offset(t: Table) -> FieldOffset:
    desc, name, batch, upper = _read_meta(t.table(0, "Meta", "meta"))
    return FieldOffset(desc, name, batch, upper, int(t.scalar(1, "i32", 0, "offset_bit")))


def _read_hint(h: Table, buf: Buffer, n_chunks: int) -> DmaHint:
    kind_code, body = h.union(0, 1, "any_hint")
    direction_code = int(h.scalar(2, "i16", 0, "direction"))
    direction = _DIRECTIONS[direction_code] if 0 <= direction_code < 2 else f"direction_{direction_code}"
    kind = _HINT_KINDS.get(kind_code)
    if kind is None:
        raise buf.fail(f"DmaHint.any_hint has unknown type {kind_code}")
    if body is None:
        if kind == "fence":
            return DmaHint("fence", direction)
        raise buf.fail(f"DmaHint of kind {kind} has no body")
    if kind == "descriptor":
        desc, name, batch, _ = _read_meta(body.table(0, "Meta", "meta"))
        offset = int(body.scalar(1, "i32", 0, "offset_in_bytes"))
        size = int(body.scalar(2, "i32", 0, "size_in_bytes"))
        if offset < 0 or size < 0:
            raise buf.fail(f"DMA descriptor hint for {desc} {name!r} has offset {offset}, size {size}")
        return DmaHint("descriptor", direction, desc, name, offset, size, batch)
    if kind == "instruction":
        chunk = int(body.scalar(0, "i32", 0, "instruction_chunk_index"))
        if not 0 <= chunk < n_chunks:
            raise buf.fail(f"instruction DMA hint names chunk {chunk}; the executable has {n_chunks}")
        return DmaHint("instruction", direction, chunk_index=chunk)
    if kind == "interrupt":
        return DmaHint("interrupt", direction, interrupt_type=int(body.scalar(0, "i16", 0, "type")))
    return DmaHint("fence", direction)


def _check_hints(hints: list[DmaHint], inputs: list[Layer], outputs: list[Layer], n_params: int,
                 batch: int, buf: Buffer) -> None:
    """Every descriptor hint stays inside what it addresses, so nothing sized from a hint can exceed it."""
    for n, h in enumerate(hints):
        if h.kind != "descriptor":
            continue
        end = h.offset + h.size
        if h.buffer_type == "parameter":
            if end > n_params:
                raise buf.fail(f"DMA hint {n} reads parameters [{h.offset}, {end}) but the executable has "
                               f"{n_params} parameter bytes")
            continue
        if h.buffer_type not in ("input", "output"):
            continue
        layers = inputs if h.buffer_type == "input" else outputs
        named = [la for la in layers if la.name == h.layer_name] or (layers if len(layers) == 1 else [])
        if not named:
            raise buf.fail(f"DMA hint {n} names {h.buffer_type} layer {h.layer_name!r}, not one of "
                           f"{[la.name for la in layers]}")
        if end > named[0].size_bytes * batch:
            raise buf.fail(f"DMA hint {n} reaches byte {end} of {h.buffer_type} layer {named[0].name!r}, "
                           f"whose size_bytes is {named[0].size_bytes} (x batch {batch})")


def _read_layer(t: Table, buf: Buffer, batch: int, kind: str) -> Layer:
    name = t.string(0, "name") or ""
    y, x, z = (
        int(t.scalar(fid, "i32", 0, label)) for fid, label in ((2, "y_dim"), (3, "x_dim"), (4, "z_dim"))
    )
    size = int(t.scalar(1, "i32", 0, "size_bytes"))
    where = f"{kind} layer {name!r}"
    if not all(0 <= d <= _MAX_DIM for d in (y, x, z)):
        raise buf.fail(f"{where}: implausible dims y_dim={y} x_dim={x} z_dim={z} (each at most {_MAX_DIM})")
    if not 0 <= size <= _MAX_LAYER_BYTES:
        raise buf.fail(f"{where}: size_bytes {size} is outside 0..{_MAX_LAYER_BYTES}")
    numerics = t.table(5, "NumericsConstants", "numerics")
    zp, dq = 0, 0.0
    if numerics is not None:
        zp = int(numerics.scalar(0, "i32", 0, "zero_point"))
        dq = float(numerics.scalar(1, "f32", 0.0, "dequantization_factor"))
    dt_code = int(t.scalar(6, "i16", 0, "data_type"))
    try:
        data_type: DataType | int = DataType(dt_code)
    except ValueError:
        data_type = dt_code
    dense = y * x * z * _DATA_TYPE_SIZE.get(dt_code, 1)
    if dense > size:  # size_bytes is the padded size: never less than the values it holds
        raise buf.fail(f"{where}: size_bytes {size} is less than y_dim x x_dim x z_dim x element size = "
                       f"{y} x {x} x {z} x {_DATA_TYPE_SIZE.get(dt_code, 1)} = {dense}")
    layout = None
    slices: tuple[SliceLayout, ...] = ()
    kind, body = t.union(7, 8, "any_layer")
    if kind == 1 and body is not None:  # OutputLayer
        layout = _read_output_layout(body.table(0, "OutputLayout", "layout"), buf, name, y, x)
        info = body.table(2, "OutputShapeInfo", "shape_info")
        if info is not None:
            slices = _read_slices(info, buf, name)
    ranges: tuple[tuple[int, int], ...] = ()
    shape = t.table(11, "TensorShape", "shape")
    if shape is not None:
        dims = shape.array(0, "i32", "dimension", width=2)
        if dims is not None:
            ranges = tuple(
                map(tuple, dims.reshape(-1, 2).tolist())
            )  # Range structs: (start, end) int32 pairs
    execs = int(t.scalar(9, "i32", 1, "execution_count_per_inference"))
    return Layer(
        name=name,
        size_bytes=size,
        shape=(max(batch, 1), y, x, z),
        zero_point=zp,
        dequant_factor=dq,
        data_type=data_type,
        execution_count_per_inference=execs,
        cache_on_dram=bool(t.scalar(10, "bool", False, "cache_on_dram")),
        tensor_shape=ranges,
        output_layout=layout,
        slices=slices,
    )


def _read_output_layout(t: Table | None, buf: Buffer, name: str, y: int, x: int) -> OutputLayout | None:
    if t is None:
        return None
    labels = (
        "y_coordinate_to_linear_tile_id_map",
        "x_coordinate_to_linear_tile_id_map",
        "linearized_tile_byte_offset",
        "x_coordinate_to_local_byte_offset",
        "y_coordinate_to_local_y_offset",
        "x_coordinate_to_local_y_row_size",
    )
    arrays = []
    for fid, label in enumerate(labels):
        a = t.array(fid, "i32", label)
        arrays.append(np.zeros(0, np.int32) if a is None else a)
    layout = OutputLayout(*arrays)
    # The relayout indexes these maps by coordinate; short maps would read garbage, so check them once here.
    need = {0: y, 1: x, 3: x, 4: y, 5: x}
    for fid, n in need.items():
        if len(arrays[fid]) < n:
            raise buf.fail(
                f"output layer {name!r}: OutputLayout.{labels[fid]} has {len(arrays[fid])} entries, needs {n}"
            )
    if y and x:  # tile id of (y, x) = y map + x map: every sum must index linearized_tile_byte_offset
        lo = int(arrays[0][:y].min()) + int(arrays[1][:x].min())
        hi = int(arrays[0][:y].max()) + int(arrays[1][:x].max())
        if lo < 0 or hi >= len(arrays[2]):
            raise buf.fail(
                f"output layer {name!r}: tile ids {lo}..{hi} but only {len(arrays[2])} tile offsets"
            )
    return layout


def _read_slices(info: Table, buf: Buffer, name: str) -> tuple[SliceLayout, ...]:
    layouts = info.tables(0, "TensorLayout", "slice_layout")
    offsets = info.ints(1, "i32", "slice_offset")
    if len(offsets) != len(layouts):
        raise buf.fail(
            f"output layer {name!r}: {len(layouts)} slice layouts but {len(offsets)} slice offsets"
        )
    out = []
    for lay, off in zip(layouts, offsets, strict=True):
        shape = lay.table(0, "TensorShape", "shape")
        dims = shape.array(0, "i32", "dimension", width=2) if shape is not None else None
        ranges = tuple(map(tuple, dims.reshape(-1, 2).tolist())) if dims is not None else ()
        out.append(SliceLayout(ranges, lay.ints(1, "i32", "stride"), off))
    return tuple(out)
