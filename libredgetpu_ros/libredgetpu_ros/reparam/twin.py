"""The CPU twin's side of a re-parameterisation: where an int8 tensor's bytes sit in the model file, and a
copy of the file with new values there (LiteRT then loads the copy; weights are packed at load time, so a
running interpreter cannot be patched in place)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ModelFormatError, WeightsError


def view_offset(base: Any, part: Any) -> int:
    """Byte offset of ``part`` (a non-empty memoryview or array viewing ``base``'s bytes) from the start of
    ``base``: where a parsed constant sits in its file."""
    start = np.asarray(part).__array_interface__["data"][0]
    return int(start - np.frombuffer(base, dtype=np.uint8).__array_interface__["data"][0])


def twin_tensor_span(model: Any, tensor_index: int) -> tuple[int, int]:
    """(byte offset, byte size) of a constant tensor's data inside ``model.data`` (a formats TfliteModel)."""
    if not 0 <= tensor_index < len(model.tensors):
        raise ModelFormatError(f"twin has no tensor {tensor_index} ({len(model.tensors)} tensors)")
    tensor = model.tensors[tensor_index]
    view = model.buffer_data(tensor)
    if view is None:
        raise ModelFormatError(f"twin tensor {tensor_index} ({tensor.name!r}) has no constant data to "
                               f"replace")
    return view_offset(model.data, view), int(view.nbytes)  # buffer_data is a view into model.data


def patch_twin_content(content: bytes, spans: Mapping[int, tuple[int, int]],
                       values: Mapping[int, np.ndarray]) -> bytes:
    """``content`` with each tensor's bytes replaced by ``values[index]`` (int8, the tensor's size)."""
    buf = bytearray(content)
    for index, array in values.items():
        if index not in spans:
            raise WeightsError(f"twin tensor {index} is not a replaceable tensor of this model")
        start, size = spans[index]
        data = np.ascontiguousarray(array, dtype=np.int8)
        if data.nbytes != size:
            raise WeightsError(f"twin tensor {index} holds {size} bytes; {data.nbytes} given")
        buf[start:start + size] = data.tobytes()
    return bytes(buf)
