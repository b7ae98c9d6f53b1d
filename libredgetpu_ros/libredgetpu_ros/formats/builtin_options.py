"""Decode the ``builtin_options`` union of a TFLite operator into a plain dict.

Only the option tables of operators this project meets (the CPU parts of PoseNet, DeepLab, SSD, classifiers
and Dense templates) are decoded; any other table yields ``{}``. Field ids and defaults follow schema.fbs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from libredgetpu_ros.formats.flatbuf import Table
from libredgetpu_ros.formats.tflite_schema import ACTIVATIONS, PADDINGS, tensor_type_name


def _enum(names: tuple[str, ...]) -> Callable[[int], str]:
    return lambda v: names[v] if 0 <= v < len(names) else str(v)


_ACT = _enum(ACTIVATIONS)
_PAD = _enum(PADDINGS)
_WEIGHTS_FORMAT = _enum(("DEFAULT", "SHUFFLED4x16INT8"))

# (field id, key, scalar kind or "i32[]" for an int vector, default, optional value mapper)
Field = tuple[int, str, str, Any, Callable[[Any], Any] | None]

_CONV: list[Field] = [
    (0, "padding", "i8", 0, _PAD),
    (1, "stride_w", "i32", 0, None),
    (2, "stride_h", "i32", 0, None),
    (3, "fused_activation_function", "i8", 0, _ACT),
    (4, "dilation_w_factor", "i32", 1, None),
    (5, "dilation_h_factor", "i32", 1, None),
]
_DEPTHWISE: list[Field] = [
    (0, "padding", "i8", 0, _PAD),
    (1, "stride_w", "i32", 0, None),
    (2, "stride_h", "i32", 0, None),
    (3, "depth_multiplier", "i32", 0, None),
    (4, "fused_activation_function", "i8", 0, _ACT),
    (5, "dilation_w_factor", "i32", 1, None),
    (6, "dilation_h_factor", "i32", 1, None),
]
_POOL: list[Field] = [
    (0, "padding", "i8", 0, _PAD),
    (1, "stride_w", "i32", 0, None),
    (2, "stride_h", "i32", 0, None),
    (3, "filter_width", "i32", 0, None),
    (4, "filter_height", "i32", 0, None),
    (5, "fused_activation_function", "i8", 0, _ACT),
]
_ACT_ONLY: list[Field] = [(0, "fused_activation_function", "i8", 0, _ACT)]
_ADD_SUB: list[Field] = [
    (0, "fused_activation_function", "i8", 0, _ACT),
    (1, "pot_scale_int16", "bool", True, None),
]

# BuiltinOptions union code -> (table name, fields)
OPTION_TABLES: dict[int, tuple[str, list[Field]]] = {
    1: ("Conv2DOptions", _CONV),
    2: ("DepthwiseConv2DOptions", _DEPTHWISE),
    5: ("Pool2DOptions", _POOL),
    8: (
        "FullyConnectedOptions",
        [
            (0, "fused_activation_function", "i8", 0, _ACT),
            (1, "weights_format", "i8", 0, _WEIGHTS_FORMAT),
            (2, "keep_num_dims", "bool", False, None),
            (3, "asymmetric_quantize_inputs", "bool", False, None),
        ],
    ),
    9: ("SoftmaxOptions", [(0, "beta", "f32", 0.0, None)]),
    10: (
        "ConcatenationOptions",
        [(0, "axis", "i32", 0, None), (1, "fused_activation_function", "i8", 0, _ACT)],
    ),
    11: ("AddOptions", _ADD_SUB),
    15: (
        "ResizeBilinearOptions",
        [(2, "align_corners", "bool", False, None), (3, "half_pixel_centers", "bool", False, None)],
    ),
    17: ("ReshapeOptions", [(0, "new_shape", "i32[]", (), None)]),
    21: ("MulOptions", _ACT_ONLY),
    27: ("ReducerOptions", [(0, "keep_dims", "bool", False, None)]),
    28: ("SubOptions", _ADD_SUB),
    29: ("DivOptions", _ACT_ONLY),
    30: ("SqueezeOptions", [(0, "squeeze_dims", "i32[]", (), None)]),
    32: (
        "StridedSliceOptions",
        [
            (0, "begin_mask", "i32", 0, None),
            (1, "end_mask", "i32", 0, None),
            (2, "ellipsis_mask", "i32", 0, None),
            (3, "new_axis_mask", "i32", 0, None),
            (4, "shrink_axis_mask", "i32", 0, None),
            (5, "offset", "bool", False, None),
        ],
    ),
    35: ("SplitOptions", [(0, "num_splits", "i32", 0, None)]),
    40: ("ArgMaxOptions", [(0, "output_type", "i8", 0, tensor_type_name)]),
    57: ("ArgMinOptions", [(0, "output_type", "i8", 0, tensor_type_name)]),
    59: ("PackOptions", [(0, "values_count", "i32", 0, None), (1, "axis", "i32", 0, None)]),
    74: (
        "ResizeNearestNeighborOptions",
        [(0, "align_corners", "bool", False, None), (1, "half_pixel_centers", "bool", False, None)],
    ),
    75: ("LeakyReluOptions", [(0, "alpha", "f32", 0.0, None)]),
    89: ("QuantizeOptions", []),
    38: ("DequantizeOptions", []),
    91: ("HardSwishOptions", []),
}


def decode_builtin_options(kind: int, table: Table | None) -> dict[str, Any]:
    """The options of union type ``kind`` as a dict ({} for absent or undecoded tables)."""
    spec = OPTION_TABLES.get(kind)
    if spec is None or table is None:
        return {}
    out: dict[str, Any] = {}
    for fid, key, scalar_kind, default, mapper in spec[1]:
        if scalar_kind == "i32[]":
            value: Any = table.ints(fid, "i32", key) if table.has(fid) else default
        else:
            value = table.scalar(fid, scalar_kind, default, key)
        out[key] = mapper(int(value)) if mapper is not None else value
    return out


def option_table_name(kind: int) -> str:
    spec = OPTION_TABLES.get(kind)
    return spec[0] if spec else f"BuiltinOptions_{kind}"
