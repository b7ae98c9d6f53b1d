"""Edge TPU output layout: tiled device output -> dense (y, x, z), and the int8 sign fix.

The device writes a multi-dimensional output tile by tile. ``OutputLayout`` (executable.fbs) gives, per
coordinate, where each (y, x) run of z values starts. Following libedgetpu's
``OutputLayerInformation::GetBufferIndex``, the start (in elements) of (y, x) is

    linearized_tile_byte_offset[y_tile[y] + x_tile[x]]
      + y_local[y] * x_row_size[x] + x_local_byte_offset[x]

and the z values of one (y, x) are contiguous there. libedgetpu's ``Relayout`` copies those runs one by one.
Here the run starts of all (y, x) are computed once per layer (cached) and the runs are gathered in one
call as rows of a sliding-window view of the device bytes (``windows[starts]``, shape (y*x, z bytes)):
numpy copies whole rows, so the cost is one index per cell, not one per byte (a (y, x, z) byte index was
2.9x slower than a per-cell copy loop on few-cell, many-channel layers such as SSD's 10x10x1280; see
bench/bench_relayout.py). When the layout is absent or trivially dense, the result is a reshape of the
input (no copy for an ndarray input).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.formats.darwinn import Layer


def fix_int8_sign(raw_uint8: np.ndarray) -> np.ndarray:
    """Device bytes of an int8 tensor -> int8 values: the device flips the sign bit (``b ^ 0x80``)."""
    raw = np.asarray(raw_uint8)
    if raw.dtype != np.uint8:
        raise TypeError(f"fix_int8_sign expects uint8 bytes, got {raw.dtype}")
    return (raw ^ np.uint8(0x80)).view(np.int8)


def element_offsets(layer: Layer) -> np.ndarray:
    """(y, x) -> element index of z=0 in the device buffer, as an int64 array of shape (y, x)."""
    lay = layer.output_layout
    y, x = layer.y_dim, layer.x_dim
    if lay is None:
        z = layer.z_dim
        return (np.arange(y, dtype=np.int64)[:, None] * x + np.arange(x, dtype=np.int64)[None, :]) * z
    tile = (
        lay.y_coordinate_to_linear_tile_id_map[:y].astype(np.int64)[:, None]
        + lay.x_coordinate_to_linear_tile_id_map[:x].astype(np.int64)[None, :]
    )
    return (
        lay.linearized_tile_byte_offset.astype(np.int64)[tile]
        + lay.y_coordinate_to_local_y_offset[:y].astype(np.int64)[:, None]
        * lay.x_coordinate_to_local_y_row_size[:x].astype(np.int64)[None, :]
        + lay.x_coordinate_to_local_byte_offset[:x].astype(np.int64)[None, :]
    )


def is_dense(layer: Layer) -> bool:
    """True when the device buffer already is the dense (y, x, z) array (relayout would be a reshape)."""
    if layer.output_layout is None or (layer.y_dim == 1 and layer.x_dim == 1):
        return True
    return bool(np.array_equal(element_offsets(layer), element_offsets(_dense_twin(layer))))


def _dense_twin(layer: Layer) -> Layer:
    from dataclasses import replace

    return replace(layer, output_layout=None)


@dataclass(frozen=True)
class _RunPlan:
    """Where a layer's (y, x) runs start in the device buffer (None: already dense) and its reach."""

    starts: np.ndarray | None  # int64 byte offsets, flat in (y, x) order
    need: int  # device bytes the layout addresses


_PLANS: weakref.WeakKeyDictionary[Layer, _RunPlan] = weakref.WeakKeyDictionary()


def _run_plan(layer: Layer) -> _RunPlan:
    """The layer's run starts, computed once per Layer object (a model's layers live as long as it)."""
    plan = _PLANS.get(layer)
    if plan is not None:
        return plan
    z_bytes = layer.z_dim * layer.element_size
    cells = layer.y_dim * layer.x_dim
    if is_dense(layer) or cells == 0 or z_bytes == 0:
        plan = _RunPlan(None, cells * z_bytes)
    else:
        starts = (element_offsets(layer) * layer.element_size).reshape(-1)
        if int(starts.min()) < 0:
            raise ModelFormatError(f"output layer {layer.name!r}: the tile layout gives a negative offset")
        plan = _RunPlan(starts, int(starts.max()) + z_bytes)
    _PLANS[layer] = plan
    return plan


def relayout_output(raw: bytes | bytearray | memoryview | np.ndarray, layer: Layer) -> np.ndarray:
    """Device output bytes of one inference -> dense uint8 bytes shaped (y, x, z * element size).

    For 1-byte data types (every Edge TPU model here) the last axis is z. ``raw`` may be longer than needed
    (USB reads are rounded up); it must cover every addressed byte.
    """
    src = np.frombuffer(raw, np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1).view(np.uint8)
    y, x, z = layer.y_dim, layer.x_dim, layer.z_dim
    z_bytes = z * layer.element_size
    if layer.execution_count_per_inference != 1:
        raise ModelFormatError(
            f"output layer {layer.name!r}: execution_count_per_inference "
            f"{layer.execution_count_per_inference} > 1 is not supported"
        )
    plan = _run_plan(layer)
    if plan.starts is None:
        if src.size < plan.need:
            raise ModelFormatError(f"output layer {layer.name!r}: got {src.size} bytes, need {plan.need}")
        return src[: plan.need].reshape(y, x, z_bytes)
    if src.size < plan.need:
        raise ModelFormatError(
            f"output layer {layer.name!r}: tiled output needs {plan.need} bytes, got {src.size}"
        )
    # Row i of `windows` is the z_bytes starting at byte i: a view of src (no copy), built with the bare
    # ndarray constructor because sliding_window_view's own checks cost more than the gather itself here.
    windows = np.ndarray((plan.need - z_bytes + 1, z_bytes), np.uint8, buffer=src, strides=(1, 1))
    return windows[plan.starts].reshape(y, x, z_bytes)


def tile_output(dense: np.ndarray, layer: Layer, size: int | None = None) -> np.ndarray:
    """Inverse of relayout_output: place a dense (y, x, z bytes) uint8 array where the device would write it.

    Used to build device-like buffers from known data (tests, simulated transports); padding bytes are 0.
    """
    y, x, z_bytes = layer.y_dim, layer.x_dim, layer.z_dim * layer.element_size
    dense = np.asarray(dense, np.uint8).reshape(y, x, z_bytes)
    starts = element_offsets(layer) * layer.element_size
    total = size if size is not None else max(int(starts.max()) + z_bytes, layer.size_bytes)
    out = np.zeros(total, np.uint8)
    out[starts[:, :, None] + np.arange(z_bytes, dtype=np.int64)[None, None, :]] = dense
    return out
