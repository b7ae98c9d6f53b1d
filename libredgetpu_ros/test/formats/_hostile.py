"""Hand-made hostile inputs for the model readers (issue 18 item 2), and byte positions of fields in real
fixture models so a test can change exactly the bytes an attacker would.

Builders write TFLite flatbuffers with the plain ``flatbuffers.Builder`` so that one table or string can be
referenced many times (what a DAG-shaped file does); ``flex_dag`` writes a FlexBuffer by hand.
"""

from __future__ import annotations

import struct

import flatbuffers
import numpy as np
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.formats.flatbuf import Buffer, Table

CUSTOM = 32  # BuiltinOperator.CUSTOM


def _offsets_vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _ints_vector(b: flatbuffers.Builder, values: list[int]) -> int:
    b.StartVector(4, len(values), 4)
    for v in reversed(values):
        b.PrependInt32(v)
    return b.EndVector()


def tflite_model(custom_code: bytes = b"MyOp", custom_options: bytes = b"", n_opcodes: int = 1,
                 n_operators: int = 1) -> bytes:
    """A TFLite model with one uint8 tensor and ``n_operators`` CUSTOM ops.

    Every entry of ``operator_codes`` points to the *same* OperatorCode table and every entry of
    ``operators`` to the *same* Operator table (legal flatbuffers, the shape of a reference-repeating file).
    """
    b = flatbuffers.Builder(len(custom_code) + len(custom_options) + 8 * (n_opcodes + n_operators) + 1024)
    code_str = b.CreateString(custom_code)
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(1, code_str, 0)
    b.PrependInt32Slot(3, CUSTOM, 0)
    b.PrependInt8Slot(0, CUSTOM, 0)
    opcode = b.EndObject()
    opcodes = _offsets_vector(b, [opcode] * n_opcodes)

    name = b.CreateString("t0")
    shape = _ints_vector(b, [1, 4])
    b.StartObject(5)
    b.PrependUOffsetTRelativeSlot(0, shape, 0)
    b.PrependInt8Slot(1, 3, 0)  # UINT8
    b.PrependUint32Slot(2, 0, 0)
    b.PrependUOffsetTRelativeSlot(3, name, 0)
    tensor = b.EndObject()
    tensors = _offsets_vector(b, [tensor])

    opts = b.CreateByteVector(custom_options) if custom_options else 0
    op_in, op_out = _ints_vector(b, [0]), _ints_vector(b, [0])
    b.StartObject(7)
    b.PrependUint32Slot(0, 0, 0)
    b.PrependUOffsetTRelativeSlot(1, op_in, 0)
    b.PrependUOffsetTRelativeSlot(2, op_out, 0)
    if opts:
        b.PrependUOffsetTRelativeSlot(5, opts, 0)
    operator = b.EndObject()
    operators = _offsets_vector(b, [operator] * n_operators)

    sg_in, sg_out = _ints_vector(b, [0]), _ints_vector(b, [0])
    b.StartObject(5)
    b.PrependUOffsetTRelativeSlot(0, tensors, 0)
    b.PrependUOffsetTRelativeSlot(1, sg_in, 0)
    b.PrependUOffsetTRelativeSlot(2, sg_out, 0)
    b.PrependUOffsetTRelativeSlot(3, operators, 0)
    subgraph = b.EndObject()
    subgraphs = _offsets_vector(b, [subgraph])

    b.StartObject(0)
    empty_buffer = b.EndObject()
    buffers = _offsets_vector(b, [empty_buffer])

    b.StartObject(5)
    b.PrependUint32Slot(0, 3, 0)
    b.PrependUOffsetTRelativeSlot(1, opcodes, 0)
    b.PrependUOffsetTRelativeSlot(2, subgraphs, 0)
    b.PrependUOffsetTRelativeSlot(4, buffers, 0)
    model = b.EndObject()
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())


def minimal_darwinn_package() -> bytes:
    """The smallest package ``read_package`` accepts: one STAND_ALONE executable with every field default."""
    exe = flatbuffers.Builder(64)
    exe.StartObject(17)
    exe.Finish(exe.EndObject())
    multi = flatbuffers.Builder(256)
    blob = multi.CreateByteVector(bytes(exe.Output()))
    multi.Finish(_table_with_vector(multi, 0, _offsets_vector(multi, [blob])))
    pkg = flatbuffers.Builder(512)
    inner = pkg.CreateByteVector(bytes(multi.Output()))
    pkg.Finish(_table_with_vector(pkg, 1, inner), file_identifier=b"DWN1")
    return bytes(pkg.Output())


def _table_with_vector(b: flatbuffers.Builder, fid: int, vector: int) -> int:
    b.StartObject(fid + 1)
    b.PrependUOffsetTRelativeSlot(fid, vector, 0)
    return b.EndObject()


def flex_dag(fanout: int = 16, depth: int = 12) -> bytes:
    """A FlexBuffer whose root vector has ``fanout`` references to one vector, which has ``fanout``
    references to the next, ``depth`` levels deep: a few hundred bytes, fanout**depth leaves if expanded."""
    w = 2  # byte width of every container and offset
    vec_type = (10 << 2) | 1  # Type.VECTOR, 16-bit elements
    out = bytearray()

    def align() -> None:
        out.extend(b"\0" * (-len(out) % w))

    # the leaf: a vector of `fanout` small ints
    align()
    out += struct.pack("<H", fanout)
    child = len(out)
    out += b"".join(struct.pack("<H", 7) for _ in range(fanout))
    out += bytes([(1 << 2) | 1]) * fanout  # Type.INT, 16-bit
    for _ in range(depth):
        align()
        out += struct.pack("<H", fanout)
        target = len(out)
        for _ in range(fanout):
            out += struct.pack("<H", len(out) - child)
        out += bytes([vec_type]) * fanout
        child = target
    align()
    out += struct.pack("<H", len(out) - child) + bytes([vec_type, w])
    return bytes(out)


def flex_repeated_string(size: int = 1 << 20, refs: int = 64) -> bytes:
    """A FlexBuffer vector with ``refs`` references to one ``size``-byte string (1 MiB by default)."""
    w = 4
    out = bytearray(struct.pack("<I", size))
    string = len(out)
    out += b"x" * size + b"\0"
    out.extend(b"\0" * (-len(out) % w))
    out += struct.pack("<I", refs)
    target = len(out)
    for _ in range(refs):
        out += struct.pack("<I", len(out) - string)
    out += bytes([(5 << 2) | 2]) * refs  # Type.STRING, 32-bit
    out += struct.pack("<I", len(out) - target) + bytes([(10 << 2) | 2, w])
    return bytes(out)


def address(view: memoryview) -> int:
    return np.frombuffer(view, np.uint8).ctypes.data if len(view) else 0


def executable_tables(data: bytes, exe_type: str = "EXECUTION_ONLY") -> tuple[int, Table]:
    """(byte offset of the executable inside ``data``, its root table) of the first Edge TPU op."""
    model = load_model(data)
    op = model.edgetpu_ops()[0]
    exe = next(e for e in model.darwinn(op).executables if e.type.name == exe_type)
    base = address(exe.data) - address(model.data)
    return base, Buffer(exe.data, "executable").root("Executable")


def output_layer_size_pos(data: bytes, index: int) -> int:
    """Byte position in the file of output layer ``index``'s ``size_bytes`` (int32)."""
    base, exe = executable_tables(data)
    layer = exe.tables(9, "Layer", "output_layers")[index]
    return base + layer.field_pos(1)


def input_hint_size_pos(data: bytes) -> int:
    """Byte position in the file of the first input DMA descriptor hint's ``size_in_bytes`` (int32)."""
    base, exe = executable_tables(data)
    hints = exe.table(7, "DmaHints", "dma_hints").tables(0, "DmaHint", "hints")
    for h in hints:
        kind, body = h.union(0, 1, "any_hint")
        if kind == 1 and body is not None:
            meta = body.table(0, "Meta", "meta")
            if meta is not None and int(meta.scalar(0, "i16", 0, "desc")) == 1:  # input activations
                return base + body.field_pos(2)
    raise AssertionError("no input descriptor hint")


def operator_inputs_count_pos(data: bytes, op_index: int) -> int:
    """Byte position in the file of operator ``op_index``'s inputs vector length word."""
    root = Buffer(memoryview(data), "model").root("Model")
    op = root.tables(2, "SubGraph", "subgraphs")[0].tables(3, "Operator", "operators")[op_index]
    span = op.vector(1, 4, "inputs")
    assert span is not None
    return span.start - 4


def replace_custom_options(data: bytes, op_index: int, options: bytes) -> bytes:
    """``data`` with operator ``op_index``'s custom options replaced in place by ``options`` (left-padded:
    a FlexBuffer is read from its end, so leading zeros are never looked at)."""
    model = load_model(data)
    raw = model.operators[op_index].custom_options_raw
    assert raw is not None and len(options) <= len(raw), (len(options), None if raw is None else len(raw))
    start = address(raw) - address(model.data)
    out = bytearray(data)
    out[start:start + len(raw)] = bytes(len(raw) - len(options)) + options
    return bytes(out)
