"""Tensor serialization of the seed: ``[ndim u8][dim u16]*ndim[values, column-major]``, and batches of them.

Column-major means the first index varies fastest (``T[i][k]`` is followed by ``T[i+1][k]``): NumPy's
Fortran order. A batch of samples (all of one shape, as the seed assumes) is encoded and decoded as one
``(n, record)`` byte matrix, so the cost is a few array copies, not a Python loop per sample. Every size is
checked against the bytes actually present before anything is allocated.
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, Reader, WireFormat

MAX_DIM = 0xFFFF
MAX_NDIM = 0xFF
MAX_ARRAY_NDIM = 32  # NumPy arrays have at most 64 dimensions; no layer needs more than 4
MAX_EXTENT = 1 << 48  # product of the dimensions (zeros counted as 1) beyond any array NumPy can describe


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=")


def tensor_header(shape: tuple[int, ...], field: str = "tensor") -> bytes:
    """``[ndim][dims...]`` for ``shape``; a shape the format cannot carry is a ProtocolError."""
    if len(shape) > MAX_NDIM:
        raise ProtocolError(f"{field}: {len(shape)} dimensions, at most {MAX_NDIM} fit the 1-byte count")
    for axis, size in enumerate(shape):
        if not 0 <= size <= MAX_DIM:
            raise ProtocolError(f"{field}: dimension {axis} = {size} does not fit the 2-byte size field")
    head = bytearray([len(shape)])
    for size in shape:
        head += size.to_bytes(2, "big")
    return bytes(head)


def encode_tensor(array: np.ndarray, wire: WireFormat = DEFAULT_WIRE, field: str = "tensor") -> bytes:
    """One tensor, values in column-major order as ``wire.value_dtype``."""
    array = np.asarray(array)
    values = np.asarray(array, dtype=wire.values).ravel(order="F")
    return tensor_header(array.shape, field) + values.tobytes()


def read_shape(reader: Reader, field: str) -> tuple[int, ...]:
    ndim = reader.u8(f"{field} number of dimensions")
    if ndim > MAX_ARRAY_NDIM:
        raise ProtocolError(f"{reader.what}: {field} has {ndim} dimensions, at most {MAX_ARRAY_NDIM} "
                            "supported")
    reader.need(2 * ndim, f"{field} dimension sizes")
    shape = tuple(reader.u16(f"{field} dimension {i}") for i in range(ndim))
    extent = 1
    for size in shape:  # an empty tensor's other dimensions still have to make a representable array
        extent *= max(size, 1)
    if extent > MAX_EXTENT:
        raise ProtocolError(f"{reader.what}: {field} shape {shape} is larger than any array can be")
    return shape


def decode_tensor(reader: Reader, wire: WireFormat = DEFAULT_WIRE, field: str = "tensor") -> np.ndarray:
    """Read one tensor at the reader's position; the values come back in native byte order."""
    shape = read_shape(reader, field)
    count = int(np.prod(shape, dtype=object)) if shape else 1
    raw = reader.take(count * wire.values.itemsize, f"{field} values ({count} of {wire.value_dtype})")
    values = np.frombuffer(raw, dtype=wire.values)
    return values.astype(_native(wire.values)).reshape(shape, order="F")


# --------------------------------------------------------------------------------------------------
# Batches: n samples, each ``input tensor ‖ target tensor``, all samples of the same shapes.


def _per_sample_column_major(batch: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """(n, values) with each sample's values in column-major order (first sample axis fastest)."""
    n = batch.shape[0]
    axes = (0, *range(batch.ndim - 1, 0, -1))
    return np.ascontiguousarray(batch.transpose(axes), dtype=dtype).reshape(n, -1)


def encode_samples(inputs: np.ndarray, targets: np.ndarray, wire: WireFormat = DEFAULT_WIRE) -> bytes:
    """The samples part of a BATCH packet: ``n`` records ``[input tensor][target tensor]``."""
    inputs, targets = np.asarray(inputs), np.asarray(targets)
    if inputs.ndim < 1 or targets.ndim < 1 or inputs.shape[0] != targets.shape[0]:
        raise ProtocolError(f"batch: inputs {inputs.shape} and targets {targets.shape} must share axis 0 "
                            "(one row per sample)")
    n = inputs.shape[0]
    head_x, head_t = tensor_header(inputs.shape[1:], "input"), tensor_header(targets.shape[1:], "target")
    vals_x = _per_sample_column_major(inputs, wire.values).view(np.uint8)
    vals_t = _per_sample_column_major(targets, wire.values).view(np.uint8)
    widths = (len(head_x), vals_x.shape[1], len(head_t), vals_t.shape[1])
    out = np.empty((n, sum(widths)), np.uint8)
    edges = np.cumsum((0, *widths))
    out[:, edges[0]:edges[1]] = np.frombuffer(head_x, np.uint8)
    out[:, edges[1]:edges[2]] = vals_x
    out[:, edges[2]:edges[3]] = np.frombuffer(head_t, np.uint8)
    out[:, edges[3]:edges[4]] = vals_t
    return out.tobytes()


def decode_samples(reader: Reader, n: int, wire: WireFormat = DEFAULT_WIRE) -> tuple[np.ndarray, np.ndarray]:
    """``n`` samples at the reader's position -> (inputs (n, *x_shape), targets (n, *t_shape)), native."""
    if n == 0:
        raise ProtocolError(f"{reader.what}: number of inputs = 0 (a batch needs at least one sample)")
    start = reader.pos
    shape_x = read_shape(reader, "sample 0 input")
    size_x = _value_bytes(shape_x, wire)
    reader.take(size_x, "sample 0 input values")
    head_t_at = reader.pos
    shape_t = read_shape(reader, "sample 0 target")
    size_t = _value_bytes(shape_t, wire)
    reader.pos = start
    head_x = 1 + 2 * len(shape_x)
    head_t = 1 + 2 * len(shape_t)
    record = head_x + size_x + head_t + size_t
    raw = reader.take(n * record, f"{n} samples of {record} bytes")  # bound checked before any copy
    rows = np.frombuffer(raw, np.uint8).reshape(n, record)
    first_x = rows[0, :head_x]
    first_t = rows[0, head_t_at - start:head_t_at - start + head_t]
    for what, lo, head in (("input", 0, first_x), ("target", head_x + size_x, first_t)):
        same = (rows[:, lo:lo + len(head)] == head).all(axis=1)
        if not same.all():
            bad = int(np.argmin(same))
            raise ProtocolError(f"{reader.what}: sample {bad} has a different {what} shape than sample 0 "
                                "(the seed requires samples of one size)")
    inputs = _values(rows[:, head_x:head_x + size_x], shape_x, wire)
    targets = _values(rows[:, record - size_t:], shape_t, wire)
    return inputs, targets


def single_tensors(reader: Reader, n: int, wire: WireFormat = DEFAULT_WIRE) -> bool:
    """Whether the rest of ``reader`` is exactly ``n`` tensors (the seed's literal BATCH, one tensor per
    sample and no target); reads shapes only, allocates nothing, leaves the reader where it was."""
    start = reader.pos
    try:
        for i in range(n):
            reader.take(_value_bytes(read_shape(reader, f"sample {i}"), wire), f"sample {i} values")
        return n > 0 and reader.remaining == 0
    except ProtocolError:
        return False
    finally:
        reader.pos = start


def _value_bytes(shape: tuple[int, ...], wire: WireFormat) -> int:
    return (int(np.prod(shape, dtype=object)) if shape else 1) * wire.values.itemsize


def _values(columns: np.ndarray, shape: tuple[int, ...], wire: WireFormat) -> np.ndarray:
    n = columns.shape[0]
    flat = np.ascontiguousarray(columns).view(wire.values).reshape(n, *shape[::-1])
    axes = (0, *range(len(shape), 0, -1))
    return np.ascontiguousarray(flat.transpose(axes), dtype=_native(wire.values))
