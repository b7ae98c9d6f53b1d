"""The control node's Dense controller (a MatMulEngine's current int8 weights and scales) as a TpuLang graph.

Core (uint8 in, uint8 out, what the Edge TPU template computes)::

    x_q [k, cols] u8 (s_in, zp_in) -> matmul_int(W^T int8 [cols, rows], per-row scales on axis 1, input_zp)
      -> int32 acc -> requant_fp(M_r = f32(s_in * s_w[r]) / s_out, offset 0, int16, half to even)
      -> requant_int(mul 1, shift 0, offset zp_out, uint8)

The zero point is added after rounding (a second requant) so odd output zero points round exactly like the
CPU twin (``rint(acc * M) + zp``). With ``float_io`` the graph also quantizes the float input
(``requant_fp_to_int``), dequantizes the output (``dequant_int_to_fp``) and adds the float bias: the same
arithmetic as ``MatMulEngine.matmul`` on the CPU twin.
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
        w = Tensor(name=WEIGHT_NAME, ttype="coeff", data=np.ascontiguousarray(weights.T), dtype="int8",
                   scale=[float(s) for s in quant.weight_scales], zero_point=0)
        acc = ops.matmul_int(xq, w, input_zp=quant.input_zero_point, out_dtype="int32", out_name="acc")
        scaled = ops_quant.requant_fp(acc, [float(m) for m in multipliers], 0, "int16", out_name="scaled",
                                      round_mode="half_to_even")
        yq = ops_quant.requant_int(scaled, 1, 0, quant.output_zero_point, 2, out_dtype="uint8",
                                   out_name="y_q" if float_io else OUTPUT_NAME)
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
