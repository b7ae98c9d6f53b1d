"""TpuLang graphs whose ``*_origin.mlir``, as TpuLang 1.30.2 itself writes them, are kept in
``data/tpulang_1.30.2/`` (written by ``tools/tpulang_record.py`` under Python 3.10 with the tpu_mlir wheel).

Every builder takes the TpuLang module (``libredgetpu_ros.sophgo`` or tpu-mlir's ``transform.TpuLang``, same
function names and arguments), builds its graph after ``init`` and returns ``(inputs, outputs)``. No import
of this package here: the recorder runs these under tpu-mlir's Python.
"""

from __future__ import annotations


def casts(tpul):
    """Issue 38 item 5: a Cast on an input, relu, Cast back: every result takes the input's shape."""
    x = tpul.Tensor([2, 3], name="x", dtype="float32")
    q = tpul.requant_fp_to_int(x, 0.5, 3, 0, "uint8", out_name="q")
    r = tpul.relu(q, out_name="r")
    return [x], [tpul.dequant_int_to_fp(r, 0.5, 3, out_name="y")]


def relu_of_input(tpul):
    """Item 5: relu on a graph input prints the input's shape (``tensor<1x2x3x3xf32>``)."""
    x = tpul.Tensor([1, 2, 3, 3], name="x", dtype="float32")
    return [x], [tpul.relu(x, out_name="y")]


def requant_of_input(tpul):
    x = tpul.Tensor([1, 4], name="x", dtype="int32")
    q = tpul.requant_int(x, 3, -1, 5, 2, out_dtype="int8", out_name="q")
    return [x], [tpul.dequant_int_to_fp(q, 0.25, 5, out_name="y")]


def softmax_of_relu(tpul):
    x = tpul.Tensor([2, 5], name="x", dtype="float32")
    r = tpul.relu(x, out_name="r")
    return [x], [tpul.softmax(r, 1, out_name="y")]


def concat_plain(tpul):
    """Item 3: differently quantized inputs, no result dtype: ``tensor<*xsi8>`` (pretty form)."""
    a = tpul.Tensor([1, 2, 2, 3], name="a", dtype="int8")
    b = tpul.Tensor([1, 1, 2, 3], name="b", dtype="int8")
    return [a, b], [tpul.concat([a, b], scales=[0.05, 0.2, 0.1], zero_points=[0, 3, 0], axis=1,
                                out_name="cat")]


def concat_int8(tpul):
    """Item 3 with dtype="int8": the result takes the last scale / zero point (generic form)."""
    a = tpul.Tensor([1, 2, 2, 3], name="a", dtype="int8")
    b = tpul.Tensor([1, 1, 2, 3], name="b", dtype="int8")
    return [a, b], [tpul.concat([a, b], scales=[0.05, 0.083, 0.0711], zero_points=[-9, -10, -7], axis=1,
                                dtype="int8", out_name="cat")]


CASES = {f.__name__: f for f in (casts, relu_of_input, requant_of_input, softmax_of_relu, concat_plain,
                                 concat_int8)}
