"""NumPy training of the worker: analytic gradients of every layer against finite differences (float64)."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.errors import ProtocolError
from libredgetpu_ros.teamtensor import nn
from libredgetpu_ros.teamtensor.model import ModelSpec, conv2d, linear, plain
from libredgetpu_ros.teamtensor.wire import LayerCode, Metric

WINDOW = 2


def _as64(model: ModelSpec) -> ModelSpec:
    out = model.copy()
    for ly in out.layers:
        if ly.trainable:
            ly.weights, ly.bias = ly.weights.astype(np.float64), ly.bias.astype(np.float64)
    return out


def _cnn(objective: Metric, softmax: bool, stride: int = 1) -> ModelSpec:
    rng = np.random.default_rng(10)
    side = (8 + 2 - 3) // stride + 1
    pooled = side // WINDOW
    layers = [conv2d(rng.normal(size=(3, 2, 3, 3)) * 0.5, rng.normal(size=3) * 0.1, pad=1, stride=stride,
                     out_width=side, out_height=side),
              plain(LayerCode.RELU), plain(LayerCode.MAXPOOL), plain(LayerCode.FLATTEN),
              linear(rng.normal(size=(4, 3 * pooled * pooled)) * 0.3, rng.normal(size=4) * 0.1)]
    if softmax:
        layers.append(plain(LayerCode.SOFTMAX))
    return ModelSpec(layers, [objective, Metric.ACCURACY])


@pytest.mark.parametrize(("objective", "softmax", "stride"), [
    (Metric.CROSS_ENTROPY, True, 1), (Metric.MSE, True, 2), (Metric.MSE, False, 1)])
def test_gradients_match_finite_differences(objective, softmax, stride):
    model = _as64(_cnn(objective, softmax, stride))
    rng = np.random.default_rng(11)
    x = rng.normal(size=(5, 2, 8, 8))
    t = np.eye(4)[rng.integers(0, 4, 5)]

    def loss() -> float:
        y, _ = nn.forward(model, x, WINDOW)
        return nn.metric_value(objective, y, t)

    _, updates = nn.gradients(model, x, t, WINDOW)
    assert len(updates) == 2
    eps = 1e-6
    for ly, grads in updates:
        for param, grad in zip((ly.weights, ly.bias), grads, strict=True):
            assert grad.shape == param.shape
            flat, gflat = param.reshape(-1), grad.reshape(-1)
            for i in rng.choice(flat.size, size=min(12, flat.size), replace=False):
                keep = flat[i]
                flat[i] = keep + eps
                up = loss()
                flat[i] = keep - eps
                down = loss()
                flat[i] = keep
                numeric = (up - down) / (2 * eps)
                assert abs(numeric - gflat[i]) <= 1e-6 + 1e-4 * abs(numeric), (ly.code, i, numeric, gflat[i])


def test_sgd_step_lowers_the_loss_and_is_deterministic():
    rng = np.random.default_rng(12)
    x = rng.normal(size=(64, 2, 8, 8)).astype(np.float32)
    t = np.eye(4, dtype=np.float32)[rng.integers(0, 4, 64)]
    runs = []
    for _ in range(2):
        model = _cnn(Metric.CROSS_ENTROPY, True)
        losses = [nn.train_step(model, x, t, 0.1, WINDOW).metrics[Metric.CROSS_ENTROPY] for _ in range(30)]
        runs.append((losses, model.parameters()))
    assert runs[0][0][-1] < 0.5 * runs[0][0][0]
    assert runs[0][0] == runs[1][0]
    assert all(np.array_equal(a, b) for a, b in zip(runs[0][1], runs[1][1], strict=True))


def test_output_shape_checks_each_layer():
    model = _cnn(Metric.CROSS_ENTROPY, True)
    assert nn.output_shape(model, (2, 8, 8), WINDOW) == (4,)
    with pytest.raises(ProtocolError, match="layer 0 Conv2D"):
        nn.output_shape(model, (2, 9, 9), WINDOW)  # the descriptor says an 8×8 output
    with pytest.raises(ProtocolError, match="layer 0 Conv2D"):
        nn.output_shape(model, (3, 8, 8), WINDOW)
    with pytest.raises(ProtocolError, match="layer 0 Linear"):
        nn.output_shape(ModelSpec([linear(np.ones((2, 3)))]), (4,), WINDOW)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_training_bytes_bounds_what_a_training_step_allocates(kind: str) -> None:
    """nn.training_bytes is what the worker's memory budget trusts (docs/teamtensor.md *Memory*): the peak
    NumPy allocation of a real train_step (tracemalloc, which NumPy reports to) must stay under it."""
    import tracemalloc

    rng = np.random.default_rng(3)
    if kind == "mlp":
        model = ModelSpec([linear(rng.standard_normal((64, 256)) * 0.01), plain(LayerCode.RELU),
                           linear(rng.standard_normal((10, 64)) * 0.01)], [Metric.MSE])
        shape, n = (256,), 128
    else:
        model = ModelSpec([conv2d(rng.standard_normal((8, 3, 3, 3)) * 0.1, None, pad=1, stride=1,
                                  out_width=32, out_height=32), plain(LayerCode.RELU),
                           plain(LayerCode.MAXPOOL), plain(LayerCode.FLATTEN),
                           linear(rng.standard_normal((10, 8 * 16 * 16)) * 0.01)],
                          [Metric.MSE])
        shape, n = (3, 32, 32), 16
    x = rng.standard_normal((n, *shape)).astype(np.float32)
    t = rng.standard_normal((n, *nn.output_shape(model, shape, WINDOW))).astype(np.float32)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        nn.train_step(model, x, t, 0.01, WINDOW)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    bound = nn.training_bytes(model, shape, n, WINDOW)
    assert 0 < peak <= bound, (peak, bound)
