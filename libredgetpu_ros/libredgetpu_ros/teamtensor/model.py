"""Model descriptors: ``[n layers u8]{[layer code u8][layer bytes]}*[n metrics u8][metric code u8]*``.

Layer bytes (seed, plus the choices documented in docs/teamtensor.md):

- Linear (0x01): weight tensor ``(out, in)`` then bias tensor ``(out,)`` (bias as in Team Tensor's code).
  Under the seed framing a descriptor whose trainable layers carry the weight tensor only (the seed's own
  layer bytes) is accepted too: those layers have ``has_bias = False``, a zero bias that is neither trained
  nor sent (GET_MD answers in the same form).
- Conv2D (0x02): four big-endian u32 words pad, stride, output width, output height; the filter tensor
  ``(out channels, in channels, height, width)``; bias tensor ``(out channels,)``.
- ReLU, MaxPool, Flatten, Softmax (0x03-0x06): no bytes (MaxPool's window is ``WireFormat.maxpool_window``).

The first metric is the objective and must be a loss (MSE or cross-entropy); cross-entropy needs a final
Softmax, whose gradient it then takes directly.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor.tensors import decode_tensor, encode_tensor
from libredgetpu_ros.teamtensor.wire import DEFAULT_WIRE, LOSSES, LayerCode, Metric, Reader, WireFormat

CONV_WORDS = struct.Struct(">IIII")
MAX_CONV_WORD = 1 << 16  # pad/stride/width/height beyond this cannot describe a 2-byte-dimension tensor


@dataclass
class Layer:
    """One layer; ``weights``/``bias`` exist for Linear and Conv2D only."""

    code: LayerCode
    weights: np.ndarray | None = None
    bias: np.ndarray | None = None
    pad: int = 0
    stride: int = 1
    out_width: int = 0
    out_height: int = 0
    has_bias: bool = True  # False: the seed's layer bytes (weights only); bias fixed at zero, never sent

    @property
    def trainable(self) -> bool:
        return self.code in (LayerCode.LINEAR, LayerCode.CONV2D)


def linear(weights: np.ndarray, bias: np.ndarray | None = None) -> Layer:
    w = np.asarray(weights, np.float32)
    b = np.zeros(w.shape[0], np.float32) if bias is None else np.asarray(bias, np.float32)
    return Layer(LayerCode.LINEAR, w, b)


def conv2d(filters: np.ndarray, bias: np.ndarray | None, *, pad: int, stride: int, out_width: int,
           out_height: int) -> Layer:
    f = np.asarray(filters, np.float32)
    b = np.zeros(f.shape[0], np.float32) if bias is None else np.asarray(bias, np.float32)
    return Layer(LayerCode.CONV2D, f, b, pad, stride, out_width, out_height)


def plain(code: LayerCode) -> Layer:
    return Layer(code)


@dataclass
class ModelSpec:
    layers: list[Layer]
    metrics: list[Metric] = field(default_factory=lambda: [Metric.MSE])

    @property
    def objective(self) -> Metric:
        return self.metrics[0]

    def copy(self) -> ModelSpec:
        return ModelSpec([Layer(ly.code, None if ly.weights is None else ly.weights.copy(),
                                None if ly.bias is None else ly.bias.copy(), ly.pad, ly.stride,
                                ly.out_width, ly.out_height, ly.has_bias) for ly in self.layers],
                         list(self.metrics))

    def parameters(self) -> list[np.ndarray]:
        """Every weight and bias array, in wire order (what GET_MD returns)."""
        return [a for ly in self.layers if ly.trainable for a in (ly.weights, ly.bias)]


def validate(model: ModelSpec) -> None:
    """Static checks that need no input shape; a failure is a ProtocolError naming the layer."""
    if not 1 <= len(model.layers) <= 255:
        raise ProtocolError(f"model: {len(model.layers)} layers, need 1..255")
    if not 1 <= len(model.metrics) <= 255:
        raise ProtocolError(f"model: {len(model.metrics)} metrics, need 1..255 (the first is the objective)")
    if model.objective not in LOSSES:
        raise ProtocolError(f"model: objective (first metric) {model.objective!r} is not a loss")
    if model.objective == Metric.CROSS_ENTROPY and model.layers[-1].code != LayerCode.SOFTMAX:
        raise ProtocolError("model: cross-entropy objective needs a final Softmax layer")
    for i, ly in enumerate(model.layers):
        if ly.code == LayerCode.LINEAR:
            w, b = ly.weights, ly.bias
            if w is None or b is None or w.ndim != 2 or b.shape != (w.shape[0],):
                raise ProtocolError(f"layer {i} Linear: weights {None if w is None else w.shape} and bias "
                                    f"{None if b is None else b.shape} must be (out, in) and (out,)")
        elif ly.code == LayerCode.CONV2D:
            f, b = ly.weights, ly.bias
            if f is None or b is None or f.ndim != 4 or b.shape != (f.shape[0],):
                raise ProtocolError(f"layer {i} Conv2D: filters {None if f is None else f.shape} and bias "
                                    f"{None if b is None else b.shape} must be (O, I, H, W) and (O,)")
            if ly.stride < 1 or min(f.shape) < 1:
                raise ProtocolError(f"layer {i} Conv2D: stride {ly.stride} and filter {f.shape} must be >= 1")
        for arr in (ly.weights, ly.bias):
            if arr is not None and not np.isfinite(arr).all():
                raise ProtocolError(f"layer {i} {ly.code.name}: non-finite weight")


def encode_model(model: ModelSpec, wire: WireFormat = DEFAULT_WIRE) -> bytes:
    validate(model)
    out = bytearray([len(model.layers)])
    for i, ly in enumerate(model.layers):
        out.append(ly.code)
        if ly.code == LayerCode.CONV2D:
            for name in ("pad", "stride", "out_width", "out_height"):
                if not 0 <= getattr(ly, name) < MAX_CONV_WORD:
                    raise ProtocolError(f"layer {i} Conv2D: {name} = {getattr(ly, name)} out of range")
            out += CONV_WORDS.pack(ly.pad, ly.stride, ly.out_width, ly.out_height)
        if ly.trainable:
            out += encode_tensor(ly.weights, wire, f"layer {i} weights")
            if ly.has_bias:
                out += encode_tensor(ly.bias, wire, f"layer {i} bias")
    out.append(len(model.metrics))
    out += bytes(int(m) for m in model.metrics)
    return bytes(out)


def decode_descriptor(reader: Reader, wire: WireFormat = DEFAULT_WIRE) -> ModelSpec:
    """The descriptor that fills the rest of ``reader``. Under the seed framing, one that does not decode
    with bias tensors is tried without them (the seed's layer bytes), before the first error is raised."""
    start = reader.pos
    try:
        model = decode_model(reader, wire)
        reader.done()
        return model
    except ProtocolError as exc:
        if not wire.seed:
            raise
        first = exc
    reader.pos = start
    try:
        model = decode_model(reader, wire, biases=False)
        reader.done()
    except ProtocolError:
        raise first from None
    return model


def decode_model(reader: Reader, wire: WireFormat = DEFAULT_WIRE, biases: bool = True) -> ModelSpec:
    """Read a descriptor at the reader's position (the caller checks it ends where it should); with
    ``biases=False`` trainable layers carry their weight tensor only (zero bias, ``has_bias = False``)."""
    n_layers = reader.u8("number of layers")
    layers = []
    for i in range(n_layers):
        raw = reader.u8(f"layer {i} code")
        try:
            code = LayerCode(raw)
        except ValueError:
            raise ProtocolError(f"{reader.what}: layer {i} code = {raw:#04x} is not a known layer") from None
        ly = Layer(code)
        if code == LayerCode.CONV2D:
            ly.pad, ly.stride, ly.out_width, ly.out_height = CONV_WORDS.unpack(
                reader.take(CONV_WORDS.size, f"layer {i} Conv2D pad/stride/width/height"))
            for name in ("pad", "stride", "out_width", "out_height"):
                if getattr(ly, name) >= MAX_CONV_WORD:
                    raise ProtocolError(f"{reader.what}: layer {i} Conv2D {name} = {getattr(ly, name)} "
                                        f"out of range")
        if ly.trainable:
            ly.weights = decode_tensor(reader, wire, f"layer {i} weights").astype(np.float32)
            if biases:
                ly.bias = decode_tensor(reader, wire, f"layer {i} bias").astype(np.float32)
            else:
                ly.bias = np.zeros(ly.weights.shape[:1], np.float32)
                ly.has_bias = False
        layers.append(ly)
    metrics = decode_metric_codes(reader)
    model = ModelSpec(layers, metrics)
    validate(model)
    return model


def decode_metric_codes(reader: Reader) -> list[Metric]:
    count = reader.u8("number of metrics")
    codes = reader.take(count, "metric codes")
    out = []
    for i, raw in enumerate(codes):
        try:
            out.append(Metric(raw))
        except ValueError:
            raise ProtocolError(f"{reader.what}: metric {i} code = {raw:#04x} is not a known metric") \
                from None
    return out
