"""Device API through the recording double: parameter caching, fault injection, locks and reopen."""

from __future__ import annotations

import numpy as np
import pytest
from libredgetpu_ros.edgetpu.device import EdgeTpuDevice
from libredgetpu_ros.edgetpu.locks import DeviceLock
from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
from libredgetpu_ros.edgetpu.transport import RecordingTransport
from libredgetpu_ros.errors import DeviceError, DeviceLostError, DeviceTimeoutError, WeightsError
from libredgetpu_ros.formats import load_model

POSENET = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"
SEG0 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_0_of_2_edgetpu.tflite"
SEG1 = "ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite"
DENSE = "matmul/dense_256_edgetpu.tflite"


class Sim(SimulatedAccelerator):
    """Serves zeros for any output read, counts parameter messages (tag 2 headers)."""

    def __init__(self) -> None:
        super().__init__()
        self.param_uploads = 0
        self.fault = None  # (predicate, exception) to inject

    def __call__(self, call):
        if self.fault and self.fault[0](call):
            raise self.fault[1]
        if call.kind == "bulk_write" and call.length == 8 and call.data and call.data[4] == 2:
            self.param_uploads += 1
        if call.kind == "bulk_read" and call.endpoint == 0x81:
            return bytes(call.length)
        return super().__call__(call)


def _open(bus: str = "test-1") -> tuple[EdgeTpuDevice, Sim, RecordingTransport]:
    sim = Sim()
    transport = RecordingTransport(sim, bus_path=bus, keep_payloads=False)
    return EdgeTpuDevice.open(transport_factory=lambda: transport), sim, transport


def _inputs(package):
    return [np.zeros(layer.size_bytes, np.uint8) for layer in package.runnable.input_layers]


@pytest.fixture()
def packages(fixture_path):
    out = {}
    for key, rel in (("posenet", POSENET), ("seg0", SEG0), ("seg1", SEG1), ("dense", DENSE)):
        model = load_model(fixture_path(rel))
        out[key] = model.darwinn(model.edgetpu_ops()[0])
    return out


def test_parameter_cache_across_model_switches(packages) -> None:
    dev, sim, _ = _open()
    with dev:

        def run(name: str) -> int:
            before = sim.param_uploads
            dev.run(packages[name], _inputs(packages[name]))
            return sim.param_uploads - before

        assert run("posenet") == 1
        assert run("posenet") == 0  # same model: cached
        assert run("seg0") == 1  # other token: evicts PoseNet
        assert run("seg1") == 1  # same token, its own blob: loaded next to seg0's
        assert run("seg0") == 0 and run("seg1") == 0  # shared token: no re-upload when alternating
        assert run("dense") == 1  # other token
        assert run("posenet") == 1  # PoseNet was evicted
        assert run("seg0") == 1
        assert dev.uploads == sim.param_uploads == 6


def test_matmul_cache_key_override_reuploads(packages) -> None:
    dev, _sim, transport = _open()
    pc = packages["dense"].parameter_caching
    with dev:
        assert dev.load_parameters(pc) is True
        assert dev.load_parameters(pc) is False
        blob = bytes(len(pc.parameters))
        assert dev.load_parameters(pc, blob, cache_key=("weights", 1)) is True
        assert dev.load_parameters(pc, blob, cache_key=("weights", 1)) is False
        assert dev.load_parameters(pc, blob, cache_key=("weights", 2)) is True
        sent = [c for c in transport.calls if c.kind == "bulk_write" and c.length == len(blob)]
        assert len(sent) == 3
        with pytest.raises(WeightsError, match=str(len(pc.parameters))):
            dev.load_parameters(pc, b"\0" * 10)
        assert dev.load_parameters(pc, blob, cache_key=("weights", 2)) is False  # bad input kept the state


@pytest.mark.parametrize(
    "fault",
    [
        ("stall", lambda c: c.kind == "bulk_write" and c.length > 8, DeviceLostError("endpoint stalled")),
        (
            "timeout",
            lambda c: c.kind == "bulk_read" and c.endpoint == 0x82,
            DeviceTimeoutError("bulk read timed out"),
        ),
        ("disconnect", lambda c: c.kind == "bulk_read" and c.endpoint == 0x81, DeviceLostError("no device")),
    ],
)
def test_faults_close_the_device_and_a_fresh_open_works(packages, fault) -> None:
    _, predicate, exc = fault
    dev, sim, transport = _open("test-fault")
    dev.run(packages["dense"], _inputs(packages["dense"]))
    sim.fault = (predicate, exc)
    with pytest.raises(type(exc)):
        dev.run(packages["posenet"], _inputs(packages["posenet"]))
    assert not dev.is_open and transport.closed
    with pytest.raises(DeviceLostError, match="closed"):
        dev.run(packages["dense"], _inputs(packages["dense"]))
    again, sim2, _ = _open("test-fault")  # lock was released
    with again:
        out = again.run(packages["dense"], _inputs(packages["dense"]))
        assert len(out) == 1 and len(out[0]) == 256 and sim2.param_uploads == 1


@pytest.mark.parametrize(
    ("raised", "seen"),
    [
        (OSError(5, "Input/output error"), DeviceLostError),  # from below libusb: becomes a device error
        (KeyboardInterrupt(), KeyboardInterrupt),  # Ctrl-C between two transfers: passes through
    ],
    ids=["oserror", "keyboardinterrupt"],
)
def test_non_device_faults_mid_transfer_close_the_device(packages, raised, seen) -> None:
    """Issue 18.7: these used to leave the device open and its lock held ("already open" on reopen)."""
    dev, sim, transport = _open("test-interrupt")
    sim.fault = (lambda c: c.kind == "bulk_write" and c.length > 8, raised)
    with pytest.raises(seen):
        dev.run(packages["dense"], _inputs(packages["dense"]))
    assert not dev.is_open and transport.closed
    again, _, _ = _open("test-interrupt")
    with again:
        assert len(again.run(packages["dense"], _inputs(packages["dense"]))[0]) == 256


def test_failed_init_releases_the_lock() -> None:
    sim = Sim()
    sim.fault = (lambda c: c.kind == "control_read", DeviceLostError("gone"))
    transport = RecordingTransport(sim, bus_path="test-init")
    with pytest.raises(DeviceLostError):
        EdgeTpuDevice.open(transport_factory=lambda: transport)
    assert transport.closed
    DeviceLock("test-init").acquire().release()


def test_one_owner_per_device() -> None:
    dev, _, _ = _open("test-lock")
    with pytest.raises(DeviceError, match="already open"):
        _open("test-lock")
    dev.close()
    dev.close()  # idempotent
    _open("test-lock")[0].close()


def test_close_halts_the_cores() -> None:
    dev, sim, _transport = _open("test-halt")
    dev.close()
    assert sim.registers[0x44018] == 2 and sim.registers[0x40210] == 2  # RunControl::kMoveToHalt


def test_backend_returns_relayouted_outputs_by_tensor_name(fixture_path) -> None:
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend
    from libredgetpu_ros.formats.layout import relayout_output

    path = fixture_path(POSENET)
    model = load_model(path)
    op = model.edgetpu_ops()[0]
    exe = model.darwinn(op).execution_only
    rng = np.random.default_rng(5)
    truth = [rng.integers(0, 256, layer.size_bytes, dtype=np.uint8) for layer in exe.output_layers]
    sim = SimulatedAccelerator(outputs=b"".join(t.tobytes() for t in truth), chunk_sizes=[40000, 777])
    backend = EdgeTpuBackend(transport=RecordingTransport(sim, bus_path="test-backend", keep_payloads=False))
    backend.load(path)
    try:
        image = np.zeros((1, 481, 641, 3), np.uint8)
        out = backend.run([image])
        for i, layer in zip(op.outputs, exe.output_layers, strict=True):
            tensor = model.tensors[i]
            want = relayout_output(truth[exe.output_layers.index(layer)], layer).reshape(tensor.shape)
            np.testing.assert_array_equal(out[tensor.name], want)
            assert out[tensor.name].dtype == tensor.dtype
        assert backend.describe()["parameter_uploads"] == 1
    finally:
        backend.close()


def test_segments_share_one_device(fixture_path) -> None:
    """SSD's two compiled segments run on one accelerator: the second backend shares the first's broker."""
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend

    seg0 = fixture_path("ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_0_of_2_edgetpu.tflite")
    seg1 = fixture_path("ssd/ssd_mobilenet_v2_coco_quant_postprocess_segment_1_of_2_edgetpu.tflite")
    sim = SimulatedAccelerator()
    first = EdgeTpuBackend(transport=RecordingTransport(sim, bus_path="test-segments", keep_payloads=False))
    first.load(seg0)
    second = EdgeTpuBackend(device=first.device)
    second.load(seg1)
    try:
        assert second.device is first.device
        # outputs of segment 0 feed segment 1 by tensor name; the simulator serves each run's output bytes
        model0, model1 = load_model(seg0), load_model(seg1)

        def serve(model) -> None:
            exe = model.darwinn(model.edgetpu_ops()[0]).runnable
            sim.queue_output(bytes(sum(layer.size_bytes for layer in exe.output_layers)))

        serve(model0)
        out0 = first.run([np.zeros(model0.tensors[model0.inputs[0]].shape, np.uint8)])
        serve(model1)
        inputs1 = [out0[model1.tensors[i].name] for i in model1.edgetpu_ops()[0].inputs]
        out1 = second.run(inputs1)
        assert set(out1) == {model1.tensors[i].name for i in model1.edgetpu_ops()[0].outputs}
    finally:
        second.close()
        assert first.device is not None and first.device.device.is_open  # the sharer leaves it open
        first.close()
