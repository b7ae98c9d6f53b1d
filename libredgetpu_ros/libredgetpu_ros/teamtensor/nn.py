"""Forward, loss, gradient and SGD for the seed's layers, vectorised NumPy in float32.

Batches are ``(N, *sample_shape)``; image samples are ``(channels, height, width)`` and Flatten lays a
sample out column-major (first axis fastest), like the wire format. Everything is deterministic: the same
model, batches and learning rate give bit-identical weights in any process (a test relies on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor.model import Layer, ModelSpec
from libredgetpu_ros.teamtensor.wire import LayerCode, Metric

_EPS = np.float32(1e-12)


def _col_major_axes(ndim: int) -> tuple[int, ...]:
    return (0, *range(ndim - 1, 0, -1))


def _conv_geometry(ly: Layer, shape: tuple[int, ...], i: int) -> tuple[int, int]:
    _, c, kh, kw = ly.weights.shape
    if len(shape) != 3 or shape[0] != c:
        raise ProtocolError(f"layer {i} Conv2D: input {shape} is not (channels={c}, height, width)")
    oh = (shape[1] + 2 * ly.pad - kh) // ly.stride + 1
    ow = (shape[2] + 2 * ly.pad - kw) // ly.stride + 1
    if oh < 1 or ow < 1 or (oh, ow) != (ly.out_height, ly.out_width):
        raise ProtocolError(f"layer {i} Conv2D: input {shape} gives an output of {ow}×{oh} (width×height), "
                            f"the descriptor says {ly.out_width}×{ly.out_height}")
    return oh, ow


def output_shape(model: ModelSpec, sample_shape: tuple[int, ...], window: int) -> tuple[int, ...]:
    """The sample shape after every layer, or a ProtocolError naming the first layer that cannot take it."""
    shape = tuple(sample_shape)
    for i, ly in enumerate(model.layers):
        if ly.code == LayerCode.LINEAR:
            if shape != (ly.weights.shape[1],):
                raise ProtocolError(f"layer {i} Linear: input {shape}, weights expect "
                                    f"({ly.weights.shape[1]},)")
            shape = (ly.weights.shape[0],)
        elif ly.code == LayerCode.CONV2D:
            shape = (ly.weights.shape[0], *_conv_geometry(ly, shape, i))
        elif ly.code == LayerCode.MAXPOOL:
            if len(shape) != 3 or shape[1] < window or shape[2] < window:
                raise ProtocolError(f"layer {i} MaxPool: input {shape} is not (C, H, W) with "
                                    f"H, W >= {window}")
            shape = (shape[0], shape[1] // window, shape[2] // window)
        elif ly.code == LayerCode.FLATTEN:
            shape = (int(np.prod(shape)),)
        elif ly.code == LayerCode.SOFTMAX and len(shape) != 1:
            raise ProtocolError(f"layer {i} Softmax: input {shape} is not a vector (Flatten first)")
    return shape


# --------------------------------------------------------------------------------------------------
# Budget: what training a batch allocates, from the descriptor alone, before anything is allocated.

_ELEMENTWISE = (LayerCode.RELU, LayerCode.SOFTMAX)
BYTES_PER_ELEMENT = 8  # float32 arrays, counted twice: NumPy's temporaries (x - t, g * p, ...) double them


def largest_input(model: ModelSpec) -> tuple[int, ...] | None:
    """The largest sample shape the model's descriptor admits, or None when the descriptor leaves it open.

    The first Linear fixes its input ``(in,)``; the first Conv2D fixes channels and, from its output size,
    stride, pad and kernel, the largest height and width that give that output
    (``(out - 1)·stride + kernel - 2·pad + stride - 1``). Layers in front of it must keep the shape
    (ReLU, Softmax); after a Flatten or MaxPool the sample's shape is not determined (checked per batch).
    """
    for i, ly in enumerate(model.layers):
        if not ly.trainable:
            continue
        if any(before.code not in _ELEMENTWISE for before in model.layers[:i]):
            return None
        if ly.code == LayerCode.LINEAR:
            return (int(ly.weights.shape[1]),)
        _, c, kh, kw = (int(d) for d in ly.weights.shape)
        s, p = ly.stride, ly.pad
        return (c, (ly.out_height - 1) * s + kh - 2 * p + s - 1, (ly.out_width - 1) * s + kw - 2 * p + s - 1)
    return None


def training_bytes(model: ModelSpec, sample_shape: tuple[int, ...], samples: int, window: int) -> int:
    """Bytes one training step on ``samples`` samples of ``sample_shape`` allocates (forward, backward and
    update), an upper bound from the shapes alone; a shape the model cannot take is a ProtocolError."""
    shape = tuple(int(d) for d in sample_shape)
    if any(d < 1 for d in shape):
        raise ProtocolError(f"sample shape {shape}: every dimension must be >= 1")
    per_sample = 2 * _size(shape)  # the batch cast to float32 and its gradient
    fixed = 0
    for i, ly in enumerate(model.layers):
        try:
            out = output_shape(ModelSpec([ly], model.metrics), shape, window)
        except ProtocolError as exc:
            raise ProtocolError(str(exc).replace("layer 0", f"layer {i}", 1)) from None
        n_in, n_out = _size(shape), _size(out)
        if ly.code == LayerCode.CONV2D:
            c, h, w = shape
            _, _, kh, kw = ly.weights.shape
            padded = c * (h + 2 * ly.pad) * (w + 2 * ly.pad)
            windows = c * int(kh) * int(kw) * out[1] * out[2]
            per_sample += 2 * padded + 3 * windows + 2 * n_out  # xp / dxp, window copies, y / dy
        elif ly.code == LayerCode.MAXPOOL:
            per_sample += 4 * n_in + 2 * n_out  # window columns (values, argmax, gradient), dx, y, dy
        else:
            per_sample += 3 * max(n_in, n_out)  # output, cache/mask, gradient
        if ly.trainable:
            fixed += 3 * (ly.weights.size + ly.bias.size)  # gradients and the scaled step
        shape = out
    return (samples * per_sample + fixed) * BYTES_PER_ELEMENT


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


# --------------------------------------------------------------------------------------------------
# Layers: forward returns (output, cache); backward returns (input gradient, parameter gradients).


def _forward(ly: Layer, x: np.ndarray, window: int) -> tuple[np.ndarray, Any]:
    code = ly.code
    if code == LayerCode.LINEAR:
        return x @ ly.weights.T + ly.bias, x
    if code == LayerCode.CONV2D:
        p, s = ly.pad, ly.stride
        kh, kw = ly.weights.shape[2:]
        xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))) if p else x
        win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::s, ::s]
        win = win[:, :, :ly.out_height, :ly.out_width]
        y = np.tensordot(win, ly.weights, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
        return np.ascontiguousarray(y) + ly.bias[None, :, None, None], (x.shape, win)
    if code == LayerCode.RELU:
        mask = x > 0
        return x * mask, mask
    if code == LayerCode.MAXPOOL:
        n, c, h, w = x.shape
        k = window
        oh, ow = h // k, w // k
        cols = x[:, :, :oh * k, :ow * k].reshape(n, c, oh, k, ow, k).transpose(0, 1, 2, 4, 3, 5)
        cols = cols.reshape(n, c, oh, ow, k * k)
        idx = cols.argmax(axis=-1)[..., None]
        return np.take_along_axis(cols, idx, axis=-1)[..., 0], (x.shape, idx)
    if code == LayerCode.FLATTEN:
        return np.ascontiguousarray(x.transpose(_col_major_axes(x.ndim))).reshape(x.shape[0], -1), x.shape
    if code == LayerCode.SOFTMAX:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        p = e / e.sum(axis=1, keepdims=True)
        return p, p
    raise ProtocolError(f"layer code {code!r} has no forward pass")


def _backward(ly: Layer, g: np.ndarray, cache: Any, window: int) -> tuple[np.ndarray, list[np.ndarray]]:
    code = ly.code
    if code == LayerCode.LINEAR:
        x = cache
        return g @ ly.weights, [g.T @ x, g.sum(axis=0)]
    if code == LayerCode.CONV2D:
        shape, win = cache
        p, s = ly.pad, ly.stride
        kh, kw = ly.weights.shape[2:]
        oh, ow = g.shape[2:]
        d_w = np.tensordot(g, win, axes=([0, 2, 3], [0, 2, 3]))
        d_win = np.tensordot(g, ly.weights, axes=([1], [0]))  # (N, OH, OW, C, KH, KW)
        n, c, h, w = shape
        dxp = np.zeros((n, c, h + 2 * p, w + 2 * p), g.dtype)
        for i in range(kh):
            for j in range(kw):
                dxp[:, :, i:i + s * oh:s, j:j + s * ow:s] += d_win[:, :, :, :, i, j].transpose(0, 3, 1, 2)
        return dxp[:, :, p:p + h, p:p + w], [d_w, g.sum(axis=(0, 2, 3))]
    if code == LayerCode.RELU:
        return g * cache, []
    if code == LayerCode.MAXPOOL:
        shape, idx = cache
        n, c, h, w = shape
        k = window
        oh, ow = h // k, w // k
        cols = np.zeros((n, c, oh, ow, k * k), g.dtype)
        np.put_along_axis(cols, idx, g[..., None], axis=-1)
        dx = np.zeros(shape, g.dtype)
        dx[:, :, :oh * k, :ow * k] = cols.reshape(n, c, oh, ow, k, k).transpose(0, 1, 2, 4, 3, 5).reshape(
            n, c, oh * k, ow * k)
        return dx, []
    if code == LayerCode.FLATTEN:
        shape = cache
        rev = g.reshape(shape[0], *shape[1:][::-1])
        return np.ascontiguousarray(rev.transpose(_col_major_axes(len(shape)))), []
    if code == LayerCode.SOFTMAX:
        p = cache
        return p * (g - (g * p).sum(axis=1, keepdims=True)), []
    raise ProtocolError(f"layer code {code!r} has no backward pass")


# --------------------------------------------------------------------------------------------------


def forward(model: ModelSpec, x: np.ndarray, window: int) -> tuple[np.ndarray, list[Any]]:
    caches = []
    for ly in model.layers:
        x, cache = _forward(ly, x, window)
        caches.append(cache)
    return x, caches


def metric_value(metric: Metric, y: np.ndarray, t: np.ndarray) -> float:
    n = y.shape[0]
    if metric == Metric.MSE:
        return float(np.mean(np.square(y - t)))
    if metric == Metric.MAE:
        return float(np.mean(np.abs(y - t)))
    if metric == Metric.CROSS_ENTROPY:
        return float(-np.sum(t * np.log(np.maximum(y, _EPS))) / n)
    if metric == Metric.ACCURACY:
        return float(np.mean(y.reshape(n, -1).argmax(axis=1) == t.reshape(n, -1).argmax(axis=1)))
    raise ProtocolError(f"metric {metric!r} cannot be computed")


@dataclass
class StepResult:
    metrics: dict[Metric, float]
    samples: int


def evaluate(model: ModelSpec, x: np.ndarray, t: np.ndarray, window: int) -> StepResult:
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # an infinite loss is a valid answer
        y, _ = forward(model, x.astype(np.float32, copy=False), window)
        return StepResult({m: metric_value(m, y, t) for m in model.metrics}, x.shape[0])


def gradients(model: ModelSpec, x: np.ndarray, t: np.ndarray,
              window: int) -> tuple[StepResult, list[tuple[Layer, list[np.ndarray]]]]:
    """Metrics of the forward pass and the objective's gradient per trainable layer (any float dtype)."""
    y, caches = forward(model, x, window)
    result = StepResult({m: metric_value(m, y, t) for m in model.metrics}, x.shape[0])
    layers = model.layers
    if model.objective == Metric.CROSS_ENTROPY:  # final Softmax + CE: gradient w.r.t. the logits directly
        g = (y - t) / y.dtype.type(x.shape[0])
        last = len(layers) - 1
    else:
        g = y.dtype.type(2.0) * (y - t) / y.dtype.type(y.size)
        last = len(layers)
    updates = []
    for i in range(last - 1, -1, -1):
        g, grads = _backward(layers[i], g, caches[i], window)
        if grads:
            updates.append((layers[i], grads))
    return result, updates


def train_step(model: ModelSpec, x: np.ndarray, t: np.ndarray, lr: float, window: int) -> StepResult:
    """One SGD step on the batch in float32; metrics are measured on the forward pass before the update.

    A step that would leave a weight infinite or NaN (the model diverged) is not applied: the weights stay
    as they were and ``FloatingPointError`` says so (a model with non-finite weights could not even be
    sent back: descriptors carry finite weights only).
    """
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # checked below, not warned
        result, updates = gradients(model, x.astype(np.float32, copy=False), t.astype(np.float32, copy=False),
                                    window)
        step = np.float32(lr)
        new = [(ly, ly.weights - step * d_w.astype(np.float32, copy=False),
                ly.bias - step * d_b.astype(np.float32, copy=False) if ly.has_bias else ly.bias)
               for ly, (d_w, d_b) in updates]  # a seed layer without bias keeps its zero bias
    if not all(np.isfinite(w).all() and np.isfinite(b).all() for _, w, b in new):
        raise FloatingPointError("the SGD step would make weights non-finite (diverged); not applied")
    for ly, w, b in new:
        ly.weights, ly.bias = w, b
    return result
