"""Writes the uncompiled Dense(N) template model with the flatbuffers Builder (no TensorFlow needed).

The graph copies the shape of the Keras-converted fixture templates: ``uint8 input -> QUANTIZE -> int8
FULLY_CONNECTED (per-row weight scales, zero point 0, no bias) -> QUANTIZE -> uint8 output``. Field numbers
are those of TensorFlow's ``lite/schema/schema.fbs``.
"""

from __future__ import annotations

import flatbuffers
import numpy as np

# schema.fbs enums
_UINT8, _INT8 = 3, 9
_OP_FULLY_CONNECTED, _OP_QUANTIZE = 9, 114
_OPTIONS_FULLY_CONNECTED = 8
_MIN_RUNTIME = b"1.14.0"


def _vector_of_tables(builder: flatbuffers.Builder, offsets: list[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        builder.PrependUOffsetTRelative(off)
    return builder.EndVector()


def _quantization(builder: flatbuffers.Builder, scales: np.ndarray, zero_points: np.ndarray) -> int:
    scale_vec = builder.CreateNumpyVector(np.asarray(scales, dtype=np.float32))
    zp_vec = builder.CreateNumpyVector(np.asarray(zero_points, dtype=np.int64))
    builder.StartObject(7)
    builder.PrependUOffsetTRelativeSlot(2, scale_vec, 0)
    builder.PrependUOffsetTRelativeSlot(3, zp_vec, 0)
    builder.PrependInt32Slot(6, 0, 0)  # quantized_dimension: rows
    return builder.EndObject()


def _tensor(builder: flatbuffers.Builder, name: str, shape: tuple[int, ...], type_code: int, buffer: int,
            scales: np.ndarray, zero_points: np.ndarray) -> int:
    name_off = builder.CreateString(name)
    shape_off = builder.CreateNumpyVector(np.asarray(shape, dtype=np.int32))
    quant_off = _quantization(builder, scales, zero_points)
    builder.StartObject(11)
    builder.PrependUOffsetTRelativeSlot(0, shape_off, 0)
    builder.PrependInt8Slot(1, type_code, 0)
    builder.PrependUint32Slot(2, buffer, 0)
    builder.PrependUOffsetTRelativeSlot(3, name_off, 0)
    builder.PrependUOffsetTRelativeSlot(4, quant_off, 0)
    return builder.EndObject()


def _operator(builder: flatbuffers.Builder, opcode: int, inputs: list[int], outputs: list[int],
              options: int | None = None) -> int:
    in_off = builder.CreateNumpyVector(np.asarray(inputs, dtype=np.int32))
    out_off = builder.CreateNumpyVector(np.asarray(outputs, dtype=np.int32))
    builder.StartObject(14)
    builder.PrependUint32Slot(0, opcode, 0)
    builder.PrependUOffsetTRelativeSlot(1, in_off, 0)
    builder.PrependUOffsetTRelativeSlot(2, out_off, 0)
    if options is not None:
        builder.PrependUint8Slot(3, _OPTIONS_FULLY_CONNECTED, 0)
        builder.PrependUOffsetTRelativeSlot(4, options, 0)
    return builder.EndObject()


def _operator_code(builder: flatbuffers.Builder, code: int, version: int) -> int:
    builder.StartObject(4)
    builder.PrependInt8Slot(0, min(code, 127), 0)  # deprecated_builtin_code (int8; 127 = "see builtin_code")
    builder.PrependInt32Slot(2, version, 1)
    builder.PrependInt32Slot(3, code, 0)
    return builder.EndObject()


def _buffer(builder: flatbuffers.Builder, data: bytes | None) -> int:
    data_off = None
    if data:
        builder.StartVector(1, len(data), 16)  # 16-byte aligned constant data
        builder.head = builder.head - len(data)
        builder.Bytes[builder.head:builder.head + len(data)] = data
        data_off = builder.EndVector()
    builder.StartObject(3)
    if data_off is not None:
        builder.PrependUOffsetTRelativeSlot(0, data_off, 0)
    return builder.EndObject()


def dense_template_tflite(weights: np.ndarray, weight_scales: np.ndarray, input_scale: float,
                          input_zero_point: int, output_scale: float, output_zero_point: int) -> bytes:
    """The uncompiled template model for int8 ``weights`` (rows, cols) with uint8 input and output."""
    weights = np.ascontiguousarray(weights, dtype=np.int8)
    rows, cols = weights.shape
    builder = flatbuffers.Builder(weights.nbytes + 4096)
    one = np.ones(1)
    tensors = [
        _tensor(builder, "input", (1, cols), _UINT8, 0, one * input_scale, [input_zero_point]),
        _tensor(builder, "dense/weights", (rows, cols), _INT8, 1, weight_scales, np.zeros(rows, np.int64)),
        _tensor(builder, "input_int8", (1, cols), _INT8, 0, one * input_scale, [input_zero_point - 128]),
        _tensor(builder, "output_int8", (1, rows), _INT8, 0, one * output_scale, [output_zero_point - 128]),
        _tensor(builder, "output", (1, rows), _UINT8, 0, one * output_scale, [output_zero_point]),
    ]
    builder.StartObject(6)  # FullyConnectedOptions, all defaults: no activation, DEFAULT weights format
    fc_options = builder.EndObject()
    operators = [
        _operator(builder, 0, [0], [2]),
        _operator(builder, 1, [2, 1, -1], [3], fc_options),
        _operator(builder, 0, [3], [4]),
    ]
    tensors_vec = _vector_of_tables(builder, tensors)
    operators_vec = _vector_of_tables(builder, operators)
    inputs_vec = builder.CreateNumpyVector(np.asarray([0], dtype=np.int32))
    outputs_vec = builder.CreateNumpyVector(np.asarray([4], dtype=np.int32))
    name = builder.CreateString("main")
    builder.StartObject(6)
    builder.PrependUOffsetTRelativeSlot(0, tensors_vec, 0)
    builder.PrependUOffsetTRelativeSlot(1, inputs_vec, 0)
    builder.PrependUOffsetTRelativeSlot(2, outputs_vec, 0)
    builder.PrependUOffsetTRelativeSlot(3, operators_vec, 0)
    builder.PrependUOffsetTRelativeSlot(4, name, 0)
    subgraph = builder.EndObject()

    codes = [_operator_code(builder, _OP_QUANTIZE, 1), _operator_code(builder, _OP_FULLY_CONNECTED, 4)]
    buffers = [_buffer(builder, None), _buffer(builder, weights.tobytes()), _buffer(builder, _MIN_RUNTIME)]
    meta_name = builder.CreateString("min_runtime_version")
    builder.StartObject(2)
    builder.PrependUOffsetTRelativeSlot(0, meta_name, 0)
    builder.PrependUint32Slot(1, 2, 0)
    metadata = builder.EndObject()

    codes_vec = _vector_of_tables(builder, codes)
    subgraphs_vec = _vector_of_tables(builder, [subgraph])
    buffers_vec = _vector_of_tables(builder, buffers)
    metadata_vec = _vector_of_tables(builder, [metadata])
    description = builder.CreateString("libredgetpu-ros template-gen")
    builder.StartObject(10)
    builder.PrependUint32Slot(0, 3, 0)  # schema version
    builder.PrependUOffsetTRelativeSlot(1, codes_vec, 0)
    builder.PrependUOffsetTRelativeSlot(2, subgraphs_vec, 0)
    builder.PrependUOffsetTRelativeSlot(3, description, 0)
    builder.PrependUOffsetTRelativeSlot(4, buffers_vec, 0)
    builder.PrependUOffsetTRelativeSlot(6, metadata_vec, 0)
    model = builder.EndObject()
    builder.Finish(model, file_identifier=b"TFL3")
    return bytes(builder.Output())
