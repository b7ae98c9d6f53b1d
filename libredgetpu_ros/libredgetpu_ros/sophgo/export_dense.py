"""The control node's Dense controller (a MatMulEngine's current int8 weights and scales) as a TpuLang graph.

Core (uint8 in, uint8 out, what the Edge TPU template computes)::

    x_q [k, cols] u8 (s_in, zp_in) -> matmul_int(W^T int8 [cols, rows], per-tensor scale 1, input_zp)
      -> int32 acc -> requant_int(m_r, shift -S, offset 0, int16, half to even, rq_axis 1, fused)
      -> requant_int(1, 0, offset zp_out, uint8, half to even)

``m_r / 2**S`` is the float32 multiplier ``M_r = f32(s_in * s_w[r]) / s_out`` exactly (its 24-bit
significand over one shift for all rows), and the second requant adds the zero point after rounding, like
the CPU twin's ``rint(acc * M) + zp`` (int16 saturation lies beyond uint8's, so it changes nothing).
This is what tpu-mlir 1.30.2 deploys to a bm1684x and runs as written (tools/tpu_mlir_check.py, its cmodel):
it lowers ``requant_fp`` only per tensor ("multi & shift size missmatch"), a ``matmul_int`` with an int32
result only when a requant follows, and its fused per-row requant applies one shift and no zero point.
The twin rounds the float32 product ``f32(acc) * M_r``; the export rounds the exact product, so the two
differ by one step only where the exact product lies within float32's rounding error of a tie.
With ``float_io`` the graph also quantizes the float input (``requant_fp_to_int``), dequantizes the output
(``dequant_int_to_fp``) and adds the float bias: the arithmetic of ``MatMulEngine.matmul`` on the CPU twin.
"""

from __future__ import annotations

import numpy as np

from libredgetpu_ros.matmul.blob import parse_blob
from libredgetpu_ros.matmul.engine import MatMulEngine
from libredgetpu_ros.matmul.twin import DenseQuantization
from libredgetpu_ros.sophgo import ops, ops_quant
from libredgetpu_ros.sophgo.graph import Tensor, build_module, private_graph, weights_of
from libredgetpu_ros.sophgo.ir import Module, TpuLangError

WEIGHT_NAME = "dense_w"
INPUT_NAME = "x"
OUTPUT_NAME = "y"
MAX_MULTIPLIER = 2**31 - 1  # int32


def multiplier_shift(multipliers: np.ndarray) -> tuple[list[int], list[int]]:
    """Integer ``(m, s)`` per float32 multiplier with ``m / 2**s`` equal to it exactly (m < 2**24, s >= 0)."""
    values = np.asarray(multipliers, dtype=np.float32).astype(np.float64)
    if not np.all(np.isfinite(values)) or np.any(values <= 0) or np.any(values >= 1):
        raise TpuLangError(f"dense export: requantization multipliers must lie in (0, 1), got "
                           f"[{values.min()!r}, {values.max()!r}]")
    significand, exponent = np.frexp(values)  # values = significand * 2**exponent, significand in [0.5, 1)
    mul = (significand * 2.0**24).astype(np.int64)  # exact: a float32 significand has 24 bits
    shift = 24 - exponent.astype(np.int64)
    for _ in range(24):  # drop trailing zero bits: the smallest exact shift
        even = (mul % 2 == 0) & (shift > 0) & (mul > 0)
        if not even.any():
            break
        mul = np.where(even, mul // 2, mul)
        shift = np.where(even, shift - 1, shift)
    return [int(v) for v in mul], [int(v) for v in shift]


def common_shift(mul: list[int], shift: list[int]) -> tuple[list[int], int]:
    """The same multipliers over the largest shift (exact: ``m << (S - s)``); an error if one overflows."""
    common = max(shift)
    scaled = [m << (common - s) for m, s in zip(mul, shift, strict=True)]
    if max(scaled) > MAX_MULTIPLIER:
        raise TpuLangError(f"dense export: the row scales span more than int32 multipliers over one shift "
                           f"hold (largest multiplier {max(scaled)} at shift {common})")
    return scaled, common


def dense_graph(weights: np.ndarray, quant: DenseQuantization, bias: np.ndarray | None = None,
                batch: int = 1, float_io: bool = True,
                name: str = "dense") -> tuple[Module, dict[str, np.ndarray]]:
    """(module, weights) of ``y = W x + b`` for int8 ``weights`` (rows, cols) quantized with ``quant``."""
    weights = np.asarray(weights)
    if weights.dtype != np.int8 or weights.ndim != 2:
        raise TpuLangError(f"dense export: weights must be a 2-D int8 array, got {weights.dtype} "
                           f"{list(weights.shape)}")
    rows, cols = weights.shape
    if quant.rows != rows:
        raise TpuLangError(f"dense export: {quant.rows} weight scales for {rows} rows")
    if bias is not None and np.asarray(bias).shape != (rows,):
        raise TpuLangError(f"dense export: bias has shape {np.asarray(bias).shape}, expected ({rows},)")
    if batch < 1:
        raise TpuLangError(f"dense export: batch must be >= 1, got {batch}")
    multipliers = quant.multipliers()
    with private_graph() as graph:
        if float_io:
            x = Tensor([batch, cols], name=INPUT_NAME, dtype="float32")
            xq = ops_quant.requant_fp_to_int(x, quant.input_scale, quant.input_zero_point, 0, "uint8",
                                             out_name="x_q")
        else:
            x = xq = Tensor([batch, cols], name=INPUT_NAME, dtype="uint8", scale=quant.input_scale,
                            zero_point=quant.input_zero_point)
        # The per-row weight scales live in the requant's multipliers; the weight keeps a per-tensor type
        # (scale 1: its raw integers) because tpu-mlir lowers a quantized MatMul only with per-tensor types.
        w = Tensor(name=WEIGHT_NAME, ttype="coeff", data=np.ascontiguousarray(weights.T), dtype="int8",
                   scale=1.0, zero_point=0)
        acc = ops.matmul_int(xq, w, input_zp=quant.input_zero_point, out_dtype="int32", out_name="acc")
        mul, shift = common_shift(*multiplier_shift(multipliers))
        # The per-row requant is fused into the matmul (fuse_rq: unfused, tpu-mlir 1.30.2 types a rank-2
        # input's per-channel table [1, rows] for 3 * rows values and codegen stops, "size does not match");
        # the fused bm1684x kernel applies the per-row multipliers but one shift and no zero point (found
        # on its cmodel), hence one common shift, int16, and the zero point in a per-tensor requant.
        scaled = ops_quant.requant_int(acc, mul, -shift, 0, 2, out_dtype="int16", out_name="scaled",
                                       round_mode="half_to_even", rq_axis=1, fuse_rq_to_matmul=True)
        yq = ops_quant.requant_int(scaled, 1, 0, quant.output_zero_point, 2, out_dtype="uint8",
                                   out_name="y_q" if float_io else OUTPUT_NAME, round_mode="half_to_even")
        yq.set_quantization(quant.output_scale, quant.output_zero_point)
        out = yq
        if float_io:
            out = ops_quant.dequant_int_to_fp(yq, quant.output_scale, quant.output_zero_point,
                                              out_name="y_wx" if bias is not None else OUTPUT_NAME)
            if bias is not None:
                b = Tensor(name="dense_b", ttype="coeff",
                           data=np.asarray(bias, dtype=np.float32).reshape(rows))
                out = ops.add(out, b, out_name=OUTPUT_NAME)
        module = build_module(name, [x], [out], quantized=True)
        return module, weights_of(graph)


def engine_int8(engine: MatMulEngine) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(int8 weights, float bias or None, version) of one weight version of a MatMulEngine."""
    for _ in range(8):  # a swap between the two reads shows as a version mismatch: read again
        blob, version = engine.current_blob()
        _, bias, bias_version = engine.get_weights()
        if bias_version == version:
            return parse_blob(blob, engine.rows, engine.cols)[0], bias, version
    raise TpuLangError("dense export: the engine's weights kept changing while being read")


def export_engine(engine: MatMulEngine, batch: int = 1,
                  name: str = "dense") -> tuple[Module, dict[str, np.ndarray]]:
    """The engine's current weights (int8 + per-row scales) and bias as a float-in/float-out graph."""
    weights, bias, _ = engine_int8(engine)
    return dense_graph(weights, engine.quantization, bias, batch=batch, name=name)
