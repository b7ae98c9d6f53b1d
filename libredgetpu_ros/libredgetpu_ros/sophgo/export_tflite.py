"""Export a uint8 TFLite classifier (MobileNet v1 style) as a quantized TpuLang graph.

Supported ops: CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D, RESHAPE, SOFTMAX, per-tensor uint8. The graph
input stays NHWC like the TFLite input (one ``permute`` to NCHW); every convolution becomes ``conv_int``
(exact int32 accumulator with the TFLite zero points) + ``requant_fp`` with the float32 multiplier
``s_in * s_w / s_out`` rounded half to even, which is the arithmetic of LiteRT's default (XNNPACK) uint8
kernels; the softmax runs in float32 on the dequantized logits (``dequant_int_to_fp``).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from libredgetpu_ros.formats import load_model
from libredgetpu_ros.sophgo import ops, ops_quant
from libredgetpu_ros.sophgo.graph import Tensor, build_module, private_graph, weights_of
from libredgetpu_ros.sophgo.ir import Module, TpuLangError

SUPPORTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "AVERAGE_POOL_2D", "RESHAPE", "SOFTMAX")
LOGITS_NAME = "logits"
PROBS_NAME = "probabilities"


def tf_same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TensorFlow SAME padding (begin, end): the extra cell goes to the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (kernel - 1) + 1 - size, 0)
    return total // 2, total - total // 2


def _pads(padding: str, hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
          dilation: tuple[int, int], where: str) -> list[int]:
    if padding == "VALID":
        return [0, 0, 0, 0]
    if padding != "SAME":
        raise TpuLangError(f"{where}: padding {padding!r} is not supported")
    top, bottom = tf_same_pads(hw[0], kernel[0], stride[0], dilation[0])
    left, right = tf_same_pads(hw[1], kernel[1], stride[1], dilation[1])
    return [top, left, bottom, right]  # TpuLang's pad order


def _quant(tensor, where: str) -> tuple[float, int]:
    q = tensor.quantization
    if q is None or len(q.scale) != 1:
        raise TpuLangError(f"{where}: tensor {tensor.name!r} must be per-tensor quantized")
    return float(q.scale[0]), int(q.zero_point[0])


def _check_activation(activation: str, scale: float, zero_point: int, where: str) -> None:
    """A fused RELU/RELU6 must be a no-op beyond uint8 saturation (true for MobileNet: range [0, 6])."""
    if activation == "NONE":
        return
    bounds = {"RELU": (0.0, None), "RELU6": (0.0, 6.0)}.get(activation)
    if bounds is None:
        raise TpuLangError(f"{where}: fused activation {activation} is not supported")
    low = zero_point + round(bounds[0] / scale)
    high = 255 if bounds[1] is None else zero_point + round(bounds[1] / scale)
    if low > 0 or high < 255:
        raise TpuLangError(f"{where}: fused {activation} clamps to [{low}, {high}], not a no-op on uint8")


class _Exporter:
    def __init__(self, model) -> None:
        self.model = model
        self.values: dict[int, Tensor] = {}  # tflite tensor index -> NCHW (or 2-D) graph tensor
        self.used: set[str] = set()

    def name(self, kind: str, op=None) -> str:
        """The TFLite layer name when there is one (``Conv2d_3_pointwise`` from
        ``MobilenetV1/MobilenetV1/Conv2d_3_pointwise/Relu6;...``), else ``kind``; unique in the graph."""
        base = kind
        if op is not None:
            parts = self.model.tensors[op.outputs[0]].name.split(";")[0].split("/")
            if len(parts) >= 2 and re.fullmatch(r"[A-Za-z0-9_]+", parts[-2]):
                base = parts[-2]
        name, n = base, 1
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name

    def const(self, index: int) -> np.ndarray:
        data = self.model.buffer_data(self.model.tensors[index])
        if data is None:
            raise TpuLangError(f"tensor {self.model.tensors[index].name!r}: missing constant data (weights)")
        return np.array(data).reshape(self.model.tensors[index].shape)

    def conv(self, op, depthwise: bool) -> None:
        where = f"{op.opcode_name} (operator {op.index})"
        x_t, w_t = (self.model.tensors[i] for i in op.inputs[:2])
        y_t = self.model.tensors[op.outputs[0]]
        opts = op.builtin_options
        s_in, zp_in = _quant(x_t, where)
        s_w, zp_w = _quant(w_t, where)
        s_out, zp_out = _quant(y_t, where)
        for t in (x_t, w_t, y_t):
            if t.dtype != np.uint8:
                raise TpuLangError(f"{where}: tensor {t.name!r} is {t.dtype}; only uint8 models are "
                                   f"supported")
        weight = self.const(op.inputs[1])
        if depthwise:  # [1, kh, kw, C * m] -> [C * m, 1, kh, kw], one group per input channel
            weight = np.ascontiguousarray(weight.transpose(3, 0, 1, 2))
            group = int(x_t.shape[3])
        else:  # OHWI -> OIHW
            weight = np.ascontiguousarray(weight.transpose(0, 3, 1, 2))
            group = 1
        bias = self.const(op.inputs[2]).astype(np.int32)
        stride = (opts["stride_h"], opts["stride_w"])
        dilation = (opts.get("dilation_h_factor", 1), opts.get("dilation_w_factor", 1))
        pads = _pads(opts["padding"], (x_t.shape[1], x_t.shape[2]), weight.shape[2:], stride, dilation, where)
        _check_activation(opts.get("fused_activation_function", "NONE"), s_out, zp_out, where)
        base = self.name("dwconv" if depthwise else "conv", op)
        w = Tensor(name=f"{base}_w", ttype="coeff", data=weight, dtype="uint8", scale=s_w, zero_point=zp_w)
        b = Tensor(name=f"{base}_b", ttype="coeff", data=bias, dtype="int32")
        acc = ops.conv_int(self.values[op.inputs[0]], w, b, stride=list(stride), dilation=list(dilation),
                           pad=pads, group=group, input_zp=zp_in, weight_zp=zp_w, out_dtype="int32",
                           out_name=f"{base}_acc")
        # The multiplier as XNNPACK computes it: float32 (s_in * s_w) / s_out.
        multiplier = float(np.float32(np.float32(s_in) * np.float32(s_w)) / np.float32(s_out))
        out = ops_quant.requant_fp(acc, multiplier, zp_out, "uint8", out_name=base, round_mode="half_to_even")
        out.set_quantization(s_out, zp_out)
        self.values[op.outputs[0]] = out

    def avgpool(self, op) -> None:
        where = f"AVERAGE_POOL_2D (operator {op.index})"
        x_t, y_t = self.model.tensors[op.inputs[0]], self.model.tensors[op.outputs[0]]
        opts = op.builtin_options
        if _quant(x_t, where) != _quant(y_t, where):
            raise TpuLangError(f"{where}: input and output quantization differ")
        kernel = (opts["filter_height"], opts["filter_width"])
        stride = (opts["stride_h"], opts["stride_w"])
        pads = _pads(opts["padding"], (x_t.shape[1], x_t.shape[2]), kernel, stride, (1, 1), where)
        _check_activation(opts.get("fused_activation_function", "NONE"), *_quant(y_t, where), where)
        # TFLite's uint8 average is (sum + count / 2) / count: half up on the raw sums, which are never
        # negative, so half away from zero gives the same numbers. tpu-mlir's bm1684x codegen refuses HalfUp
        # (atomic_rq_f32mode_gen_cmd asserts f2i_mode != ROUND_HALF_UP) and accepts HalfAwayFromZero.
        # scale/zero_point [in, out]: TpuLang leaves a pool's result unquantized without them.
        scale, zero_point = _quant(x_t, where)
        self.values[op.outputs[0]] = ops.avgpool2d(self.values[op.inputs[0]], list(kernel), list(stride),
                                                   pads, scale=[scale, scale],
                                                   zero_point=[zero_point, zero_point],
                                                   out_name=self.name("avgpool", op),
                                                   round_mode="half_away_from_zero")

    def reshape(self, op) -> None:
        x = self.values[op.inputs[0]]
        y_t = self.model.tensors[op.outputs[0]]
        if len(x.shape) == 4 and x.shape[2:] != [1, 1]:  # TFLite reshapes NHWC data
            x = ops.permute(x, [0, 2, 3, 1], out_name=self.name("to_nhwc"))
        self.values[op.outputs[0]] = ops.reshape(x, list(y_t.shape), out_name=LOGITS_NAME)

    def softmax(self, op) -> None:
        where = f"SOFTMAX (operator {op.index})"
        if abs(op.builtin_options.get("beta", 1.0) - 1.0) > 0:
            raise TpuLangError(f"{where}: beta != 1 is not supported by TpuLang's softmax")
        x_t = self.model.tensors[op.inputs[0]]
        scale, zp = _quant(x_t, where)
        x = self.values[op.inputs[0]]
        real = ops_quant.dequant_int_to_fp(x, scale, zp, out_name=self.name("dequant"))
        self.values[op.outputs[0]] = ops.softmax(real, len(x.shape) - 1, out_name=PROBS_NAME)


def export_classifier(model_path: str | Path,
                      name: str = "mobilenet") -> tuple[Module, dict[str, np.ndarray]]:
    """(module, weights) of the TFLite model as a TOP_QUANTIZED TpuLang graph."""
    model = load_model(Path(model_path))
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise TpuLangError(f"{model_path}: expected one input and one output")
    for op in model.operators:
        if op.opcode_name not in SUPPORTED:
            raise TpuLangError(f"{op.opcode_name} (operator {op.index}): not supported by the TpuLang export "
                               f"({', '.join(SUPPORTED)} are)")
    in_t = model.tensors[model.inputs[0]]
    if len(in_t.shape) != 4 or in_t.dtype != np.uint8:
        raise TpuLangError(f"{model_path}: input {in_t.name!r} must be a uint8 NHWC image")
    scale, zp = _quant(in_t, "input")
    with private_graph() as graph:
        exporter = _Exporter(model)
        image = Tensor(list(in_t.shape), name="image", dtype="uint8", scale=scale, zero_point=zp)
        exporter.values[model.inputs[0]] = ops.permute(image, [0, 3, 1, 2], out_name="image_nchw")
        for op in model.operators:
            if op.opcode_name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
                exporter.conv(op, op.opcode_name == "DEPTHWISE_CONV_2D")
            elif op.opcode_name == "AVERAGE_POOL_2D":
                exporter.avgpool(op)
            elif op.opcode_name == "RESHAPE":
                exporter.reshape(op)
            else:
                exporter.softmax(op)
        output = exporter.values.get(model.outputs[0])
        if output is None:
            raise TpuLangError(f"{model_path}: the graph output is not produced by a supported op")
        module = build_module(name, [image], [output], quantized=True)
        return module, weights_of(graph)
