"""backends/base.check_inputs: the one input check every backend runs, a frame already at the model's exact
shape and dtype (what the modules and nodes hand over) included."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from libredgetpu_ros.backends.base import TensorSpec, check_inputs
from libredgetpu_ros.errors import InputError
from libredgetpu_ros.formats import load_model

MNV1 = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


def _spec(shape: tuple[int, ...], dtype=np.uint8) -> TensorSpec:
    return TensorSpec(index=0, name="input", shape=shape, dtype=np.dtype(dtype), scale=1.0, zero_point=0)


def test_an_exact_input_is_passed_on_as_given_and_the_rest_is_checked() -> None:
    spec = _spec((1, 4, 4, 3))
    frame = np.arange(48, dtype=np.uint8).reshape(spec.shape)
    read_only = frame.copy()
    read_only.flags.writeable = False
    strided = np.zeros((1, 4, 8, 3), np.uint8)[:, :, ::2]  # a ROS message's view can be either
    for array in (frame, read_only, strided):
        (checked,) = check_inputs((array,), (spec,))
        assert checked is array  # no view, no copy
    (batchless,) = check_inputs([frame[0]], [spec])  # the leading batch of 1 added, as a view
    assert batchless.shape == spec.shape and np.shares_memory(batchless, frame)
    pair = (spec, _spec((1, 2), np.int8))
    first, second = check_inputs([frame, np.zeros(2, np.int8)], pair)  # more than one input: each checked
    assert first is frame and second.shape == (1, 2)
    with pytest.raises(InputError, match="dtype int8 given"):
        check_inputs([frame.astype(np.int8)], [spec])
    with pytest.raises(InputError, match=r"shape \(1, 2, 4, 3\) given"):
        check_inputs([frame[:, :2]], [spec])
    with pytest.raises(InputError, match="expected 1 input"):
        check_inputs([frame, frame], [spec])
    with pytest.raises(InputError, match="a NumPy array is needed, got list"):  # not an AttributeError
        check_inputs([frame.tolist()], [spec])
    with pytest.raises(InputError, match="a NumPy array is needed, got int"):
        check_inputs([frame, 3], pair)
    with pytest.raises(InputError, match="expected 2 input"):
        check_inputs([frame], pair)


def _open(kind: str, path):
    if kind == "cpu":
        from libredgetpu_ros.backends.cpu import CpuBackend

        backend = CpuBackend()
        backend.load(path)
        return backend
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend
    from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
    from libredgetpu_ros.edgetpu.transport import RecordingTransport

    model = load_model(path)
    layers = model.darwinn(model.edgetpu_ops()[0]).execution_only.output_layers
    sim = SimulatedAccelerator(outputs=bytes(sum(layer.size_bytes for layer in layers)))  # one run's
    backend = EdgeTpuBackend(transport=RecordingTransport(sim, bus_path=f"test-check-inputs-{kind}",
                                                          keep_payloads=False))
    backend.load(path)
    return backend


@pytest.mark.parametrize("kind", ["cpu", "edgetpu"])
def test_every_backend_checks_a_fitted_frame_through_check_inputs(kind, fixture_path, monkeypatch) -> None:
    """The frame at the model's exact shape and dtype goes through the shared check on the CPU backend
    too (it had a shortcut of its own past it): what check_inputs decides holds for every backend."""
    seen = []

    def recording(inputs, specs):
        seen.append(tuple(inputs))
        return check_inputs(inputs, specs)

    module = importlib.import_module(f"libredgetpu_ros.backends.{kind}")
    monkeypatch.setattr(module, "check_inputs", recording)
    backend = _open(kind, fixture_path(MNV1))
    try:
        spec = backend.boundary.inputs[0]
        frame = np.random.default_rng(3).integers(0, 256, spec.shape, dtype=np.uint8)
        out = backend.run([frame])
        assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0] is frame
        assert list(out) == list(backend.boundary.output_names)
        with pytest.raises(InputError, match="dtype"):
            backend.run([frame.astype(np.int8)])
    finally:
        backend.close()
