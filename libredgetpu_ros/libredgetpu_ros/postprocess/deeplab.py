"""DeepLabV3's CPU tail: the ops the Edge TPU compiler leaves after the ``edgetpu-custom-op`` (image-pooling
resize, requantize, concatenation, two 1x1 convolutions, the upsampling resizes and ARG_MAX), interpreted
from the compiled model's graph with TFLite's quantized arithmetic.

Bit-exact with LiteRT's builtin kernels, and fast: the 1x1 convolutions are float32 BLAS matmuls on the
zero-point-centred integers (exact: every partial sum stays below 2^24, else float64), with the constant
image-pooling half of the concatenation multiplied once instead of per pixel (its products join the bias),
into buffers reused from call to call (a pool of workspaces, one per concurrent call; the first is made and
touched when the tail is built, with one run on zeros, so the first frame costs what the next ones cost); the
accumulators are requantized with TFLite's integer arithmetic in
one compiled pass (``kernels``; without numba mostly in float32, ``qops.AccumulatorRequantizer``);
the last RESIZE_BILINEAR + ARG_MAX pair is fused (``resize.UpsampleArgmax``: only cells on class boundaries
are interpolated). A concatenation read only by 1x1 convolutions is never joined (they take its blocks).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ModelFormatError
from libredgetpu_ros.postprocess import kernels
from libredgetpu_ros.postprocess.graph import (
    TensorSpec,
    model_label,
    per_tensor_quant,
    require_op,
    take_outputs,
)
from libredgetpu_ros.postprocess.qops import AccumulatorRequantizer, concat_parts, quantize_multiplier, run_op
from libredgetpu_ros.postprocess.resize import UpsampleArgmax, resize_bilinear

TAIL_OPS = frozenset({"RESIZE_BILINEAR", "QUANTIZE", "DEQUANTIZE", "CONCATENATION", "RESHAPE", "CONV_2D",
                      "ARG_MAX"})


class DeepLabTail:
    """Runs the CPU ops after the Edge TPU boundary of a DeepLab model; returns the class map."""

    def __init__(self, model: Any, boundary: list[int], ops: list[Any]) -> None:
        self._model = model
        self.specs = [TensorSpec.of(model, i) for i in boundary]
        self._boundary = boundary
        self._ops = ops
        self._argmax = ops[-1]
        self._convs = {op.index: _Conv1x1(model, op) for op in ops if op.opcode_name == "CONV_2D"}
        out = model.tensors[self._argmax.outputs[0]]
        self.output_shape = tuple(int(d) for d in out.shape[1:3])
        # Concatenations whose every reader is a 1x1 convolution: kept as blocks, never joined.
        self._blocks_only = {
            op.outputs[0] for op in ops if op.opcode_name == "CONCATENATION"
            and all(reader.opcode_name == "CONV_2D" for reader in ops if op.outputs[0] in reader.inputs)}
        final_resize = model.producer(self._argmax.inputs[0])
        upsampled = final_resize is not None and final_resize.opcode_name == "RESIZE_BILINEAR"
        self._last = final_resize if upsampled else self._argmax
        self._upsample: UpsampleArgmax | None = None
        if self._last is not self._argmax:
            opts = self._last.builtin_options
            in_h, in_w = (int(d) for d in model.tensors[self._last.inputs[0]].shape[1:3])
            self._upsample = UpsampleArgmax(in_h, in_w, *self.output_shape,
                                            bool(opts.get("align_corners", False)),
                                            bool(opts.get("half_pixel_centers", False)))
        self._free: list[dict[int, Any]] = []  # workspaces (conv buffers by op) not in use by a call
        self._free_lock = threading.Lock()
        self({s.name: np.zeros(s.shape, s.dtype) for s in self.specs})  # warm-up: BLAS, kernels, buffers

    @classmethod
    def from_model(cls, model: Any, boundary_names: list[str] | None = None) -> DeepLabTail:
        """``model``: the compiled model (boundary = Edge TPU op outputs), or any model plus the boundary
        tensor names (for a CPU twin)."""
        argmax = require_op(model, "ARG_MAX", "the DeepLab class map")
        if boundary_names is not None:
            boundary = [model.tensor_by_name(n).index for n in boundary_names]
        else:
            edgetpu = require_op(model, "edgetpu-custom-op", "locating the Edge TPU boundary "
                                 "(or pass boundary_names for a CPU model)")
            boundary = list(edgetpu.outputs)
        ops = _ops_between(model, boundary, argmax)
        unsupported = sorted({op.opcode_name for op in ops} - TAIL_OPS)
        if unsupported:
            raise ModelFormatError(f"{model_label(model)}: DeepLab tail has unsupported ops: "
                                   f"{', '.join(unsupported)}")
        return cls(model, boundary, ops)

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.specs]

    @contextmanager
    def _workspace(self) -> Iterator[dict[int, Any]]:
        """A free workspace (or a new one) for one call, returned to the pool when the call is done with the
        arrays in it."""
        with self._free_lock:
            workspace = self._free.pop() if self._free else {}
        try:
            yield workspace
        finally:
            with self._free_lock:
                self._free.append(workspace)

    def _run(self, outputs: Mapping[str, np.ndarray], workspace: dict[int, Any]) -> tuple[np.ndarray, Any]:
        """Every op up to the final upsample (or ARG_MAX); returns that op's input (maybe a buffer of
        ``workspace``) and the op."""
        arrays = take_outputs(outputs, self.specs, "DeepLabTail")
        env: dict[int, np.ndarray] = {i: a[0] for i, a in zip(self._boundary, arrays, strict=True)}
        parts: dict[int, list[np.ndarray]] = {}  # channel blocks of CONCATENATION outputs
        last = self._last
        for op in self._ops[:-1]:
            if op is last:
                break
            env[op.outputs[0]] = self._eval(op, env, parts, workspace)
        return env[last.inputs[0]], last

    def logits(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The quantized logits before the final upsampling, (h, w, classes); a new array."""
        with self._workspace() as workspace:
            return self._run(outputs, workspace)[0].copy()

    def __call__(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """(H_in, W_in) class-id map (uint8 when the classes fit); a new array."""
        with self._workspace() as workspace:
            logits, _ = self._run(outputs, workspace)
            if self._upsample is not None:
                return self._upsample(logits)
            classes = np.argmax(logits, axis=-1)
            return classes.astype(np.uint8) if logits.shape[-1] <= 256 else classes

    def reference(self, outputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The class map the slow way (every channel upsampled, then argmax): the check for ``__call__``."""
        with self._workspace() as workspace:
            logits, last = self._run(outputs, workspace)
            logits = logits.copy()
        if last.opcode_name == "RESIZE_BILINEAR":
            opts = last.builtin_options
            logits = resize_bilinear(logits, *self.output_shape, bool(opts.get("align_corners", False)),
                                     bool(opts.get("half_pixel_centers", False)))
        classes = np.argmax(logits, axis=-1)
        return classes.astype(np.uint8) if logits.shape[-1] <= 256 else classes

    def _eval(self, op: Any, env: dict[int, np.ndarray], parts: dict[int, list[np.ndarray]],
              workspace: dict[int, Any]) -> np.ndarray:
        model = self._model
        out = model.tensors[op.outputs[0]]
        if op.opcode_name == "RESIZE_BILINEAR":
            opts = op.builtin_options
            return resize_bilinear(env[op.inputs[0]], int(out.shape[1]), int(out.shape[2]),
                                   bool(opts.get("align_corners", False)),
                                   bool(opts.get("half_pixel_centers", False)))
        if op.opcode_name == "CONV_2D":
            buffers = workspace.setdefault(op.index, {})
            return self._convs[op.index](parts.get(op.inputs[0], [env[op.inputs[0]]]), buffers)
        args = [env[i] for i in op.inputs if i in env]
        if op.opcode_name == "CONCATENATION" and \
                int(op.builtin_options.get("axis", 0)) % len(out.shape) == len(out.shape) - 1:
            blocks = concat_parts(model, op, [a[None] for a in args])
            parts[op.outputs[0]] = [b[0] for b in blocks]
            if op.outputs[0] in self._blocks_only:
                return blocks[0][0]  # a placeholder: the convolutions read ``parts``
            return np.concatenate(blocks, axis=-1)[0]
        if op.opcode_name in ("QUANTIZE", "DEQUANTIZE") and args[0].strides[:2] == (0, 0):
            # Element-wise op on a broadcast tile (the image-pooling branch): compute one pixel only.
            return np.broadcast_to(run_op(model, op, [args[0][None, :1, :1]])[0], args[0].shape)
        return run_op(model, op, [a[None] for a in args])[0]


class _Conv1x1:
    """A 1x1, stride-1 quantized CONV_2D as a matmul with TFLite's requantization and fused activation."""

    def __init__(self, model: Any, op: Any) -> None:
        where = f"{model_label(model)}: CONV_2D op {op.index}"
        weights_t = model.tensors[op.inputs[1]]
        weights = model.buffer_data(weights_t)
        if weights is None or weights.ndim != 4 or weights.shape[1:3] != (1, 1):
            raise ModelFormatError(f"{where}: only constant 1x1 filters are supported, got {weights_t.shape}")
        opts = op.builtin_options
        if opts.get("stride_h", 1) != 1 or opts.get("stride_w", 1) != 1:
            raise ModelFormatError(f"{where}: only stride 1 is supported")
        in_t = model.tensors[op.inputs[0]]
        in_scale, self.in_zp = per_tensor_quant(model, in_t)
        info_in = np.iinfo(in_t.dtype)
        out_t = model.tensors[op.outputs[0]]
        out_scale, self.out_zp = per_tensor_quant(model, out_t)
        wq = weights_t.quantization
        w_scales = np.asarray(wq.scale, dtype=np.float64).ravel()
        w_zps = np.asarray(wq.zero_point, dtype=np.int64).ravel()
        centred = weights.reshape(weights.shape[0], -1).astype(np.int64) - w_zps[:, None]
        self.weights_t = np.ascontiguousarray(centred.T.astype(np.float32))  # (in, out)
        # |partial sum| bound per input-channel range: float32 sums are exact below 2^24.
        span = np.int64(max(abs(info_in.max - self.in_zp), abs(info_in.min - self.in_zp)))
        self._abs_cumsum = np.concatenate([np.zeros((1, centred.shape[0]), np.int64),
                                           np.cumsum(np.abs(centred.T) * span, axis=0)])
        bias = model.buffer_data(model.tensors[op.inputs[2]]) if len(op.inputs) > 2 and op.inputs[2] >= 0 \
            else None
        self.bias = np.zeros(centred.shape[0], np.int64) if bias is None else bias.astype(np.int64)
        # Real multiplier computed in double from float32 scales, as TFLite does.
        real = (np.float64(np.float32(in_scale)) * w_scales.astype(np.float32).astype(np.float64)
                / np.float64(np.float32(out_scale)))
        pairs = [quantize_multiplier(float(r)) for r in np.broadcast_to(real, (centred.shape[0],))]
        self.multiplier = np.array([m for m, _ in pairs], dtype=np.int64)
        self.shift = np.array([s for _, s in pairs], dtype=np.int64)
        info = np.iinfo(out_t.dtype)
        self.dtype = out_t.dtype
        low, high = info.min, info.max
        act = opts.get("fused_activation_function", "NONE")

        def q(v: float) -> int:
            return self.out_zp + round(v / out_scale)

        if act == "RELU":
            low = max(low, q(0.0))
        elif act == "RELU6":
            low, high = max(low, q(0.0)), min(high, q(6.0))
        elif act == "RELU_N1_TO_1":
            low, high = max(low, q(-1.0)), min(high, q(1.0))
        elif act != "NONE":
            raise ModelFormatError(f"{where}: fused activation {act} not supported")
        self.low, self.high = low, high
        # LiteRT's CONV_2D requantizes in ruy (halves of the last shift rounded up, negatives included).
        self.requantize = AccumulatorRequantizer(self.multiplier, self.shift, self.out_zp, low, high,
                                                 self.dtype, half_up=True)
        self._kernel = kernels.requantize_kernel(self.dtype)
        self._shift_params = kernels.shift_params(self.multiplier, self.shift, half_up=True)

    def _bound(self, first: int, count: int) -> int:
        """Largest |partial sum| over input channels [first, first + count), per the weights."""
        return int((self._abs_cumsum[first + count] - self._abs_cumsum[first]).max(initial=0))

    def _buffers(self, workspace: dict[str, np.ndarray], pixels: int,
                 channels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(input as float32, accumulators, output) arrays of ``workspace``, made on first use."""
        if workspace.get("x") is None or workspace["x"].shape != (pixels, channels):
            out_channels = self.weights_t.shape[1]
            workspace.update(x=np.empty((pixels, channels), np.float32),
                             acc=np.empty((pixels, out_channels), np.float32),
                             out=np.empty((pixels, out_channels), self.dtype))
        return workspace["x"], workspace["acc"], workspace["out"]

    def __call__(self, parts: list[np.ndarray], workspace: dict[str, np.ndarray]) -> np.ndarray:
        """``parts``: the input's channel blocks in order, (h, w, c_i) each; blocks broadcast from one pixel
        (an image-pooling tile) are multiplied once, not per pixel. The result may be an array of
        ``workspace``, which the caller owns until it is done with it."""
        fast = self._fast(parts, workspace) if self._kernel is not None else None
        return fast if fast is not None else self._numpy(parts)

    def _fast(self, parts: list[np.ndarray], workspace: dict[str, np.ndarray]) -> np.ndarray | None:
        """One float32 matmul for the per-pixel block, the constant blocks' exact products added to the bias,
        the compiled integer requantization; None when the blocks do not fit that (more than one per-pixel
        block, or partial sums beyond 2^24)."""
        h, w, _ = parts[0].shape
        offset = self.bias.copy()
        pixel_block, first = None, 0
        for part in parts:
            c = part.shape[2]
            if part.strides[0] == 0 and part.strides[1] == 0:  # one pixel's exact products, into the bias
                exact = np.float32 if self._bound(first, c) < 1 << 24 else np.float64
                centred = part[0, 0].astype(exact) - exact(self.in_zp)
                offset += np.rint(centred @ self.weights_t[first:first + c].astype(exact, copy=False)).astype(
                    np.int64)
            elif pixel_block is not None or self._bound(first, c) >= 1 << 24:
                return None
            else:
                pixel_block = (first, part)
            first += c
        if pixel_block is None:
            return None
        first, part = pixel_block
        c = part.shape[2]
        x, acc, out = self._buffers(workspace, h * w, c)
        np.subtract(part.reshape(-1, c), np.float32(self.in_zp), out=x)
        np.matmul(x, self.weights_t[first:first + c], out=acc)
        self._kernel(acc, offset, *self._shift_params, self.out_zp, self.low, self.high, out)
        return out.reshape(h, w, -1)

    def _numpy(self, parts: list[np.ndarray]) -> np.ndarray:
        """The path without numba: per-block matmuls, requantized mostly in float32."""
        h, w, _ = parts[0].shape
        partials, first = [], 0
        for part in parts:
            c = part.shape[2]
            weights = self.weights_t[first:first + c]
            constant = part.strides[0] == 0 and part.strides[1] == 0
            x = part[:1, :1] if constant else part
            centred = x.reshape(-1, c).astype(np.float32) - np.float32(self.in_zp)
            if self._bound(first, c) < 1 << 24:  # integer products summed in float32: exact
                partials.append(centred @ weights)
            else:
                partials.append(np.rint(centred.astype(np.float64) @ weights.astype(np.float64)))
            first += c
        return self.requantize(partials, self.bias).reshape(h, w, -1)


def _ops_between(model: Any, boundary: list[int], argmax: Any) -> list[Any]:
    """Ops on the paths from the boundary tensors to ``argmax``, in graph order (argmax last)."""
    needed: dict[int, Any] = {argmax.index: argmax}
    stack = [i for i in argmax.inputs if i >= 0]
    stop = set(boundary)
    while stack:
        idx = stack.pop()
        if idx in stop:
            continue
        producer = model.producer(idx)
        if producer is None:
            if model.buffer_data(model.tensors[idx]) is None:
                name = model.tensors[idx].name
                raise ModelFormatError(f"{model_label(model)}: tensor {name!r} feeds ARG_MAX but is neither "
                                       "constant nor behind the boundary")
            continue
        if producer.opcode_name == "edgetpu-custom-op":
            name = model.tensors[idx].name
            raise ModelFormatError(f"{model_label(model)}: Edge TPU output {name!r} is not among the "
                                   "boundary tensors")
        if producer.index not in needed:
            needed[producer.index] = producer
            stack.extend(i for i in producer.inputs if i >= 0)
    return [needed[k] for k in sorted(needed)]
