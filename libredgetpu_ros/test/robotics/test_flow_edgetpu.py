"""OpticalFlow on the Edge TPU path with scripted device bytes: the real driver and backend over the
recording transport double (no device), the simulated accelerator answering each input with the CPU twin's
feature map of that frame laid out in the compiled model's output tiles. The flow must equal the CPU path's
exactly (our side of the protocol: input bytes, output relayout, one parameter upload for a whole stream,
one inference per frame). Real hardware: the ``hardware`` marker test at the end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.robotics.flow import OpticalFlow
from libredgetpu_ros.robotics.template import TemplateRunner, load_template

from .._helpers import load_helper

scenes = load_helper(Path(__file__).with_name("_flow_scenes.py"))


def _scripted_backend(template, answers: list[np.ndarray], bus: str):
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend
    from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
    from libredgetpu_ros.edgetpu.transport import RecordingTransport
    from libredgetpu_ros.formats.layout import tile_output

    package = template.package()
    runnable = package.execution_only or package.stand_alone
    layer = runnable.output_layers[0]

    class Scripted(SimulatedAccelerator):
        """Queues the next feature map when an input message starts (tag 1 header); counts inputs and
        parameter messages (tag 2)."""

        def __init__(self) -> None:
            super().__init__()
            self.param_uploads = 0
            self.inputs = 0

        def __call__(self, call):
            header = call.kind == "bulk_write" and call.length == 8 and call.data is not None
            if header and call.data[4] == 2:
                self.param_uploads += 1
            if header and call.data[4] == 1:
                self.inputs += 1
                self.queue_output(tile_output(answers.pop(0), layer).tobytes())
            return super().__call__(call)

    sim = Scripted()
    backend = EdgeTpuBackend(transport=RecordingTransport(sim, bus_path=bus, keep_payloads=False))
    backend.load(template.compiled_path, template.twin_path)
    return backend, sim


@pytest.mark.parametrize("name", ["gabor_64x64_p4", "gabor_64x64_7k_4o_2s"])
def test_edgetpu_path_equals_cpu_path(name: str) -> None:
    template = load_template(name)
    scene = scenes.photo("grace_hopper.bmp", 300)
    frames = [scenes.shifted_pair(scene, 3.0 * k, -1.5 * k)[1] for k in range(6)]
    with OpticalFlow.from_template(name, backend="cpu") as cpu:
        want = [cpu.step(frame, 0.1 * k) for k, frame in enumerate(frames)]
    # the normalised mode sends the contrast-stretched frame: script the twin's answer to that frame
    with OpticalFlow.from_template(name, backend="cpu") as cpu:
        stretched = []
        real_run = cpu.runner.backend.run

        def keep(inputs, **kwargs):
            out = real_run(inputs, **kwargs)
            stretched.append(out["output"][0].copy())
            return out

        cpu.runner.backend.run = keep
        for frame in frames:
            cpu.features(frame)
    assert len(stretched) == len(frames)
    backend, sim = _scripted_backend(template, list(stretched), f"test-flow-{name}")
    flow = OpticalFlow(TemplateRunner(template, backend_object=backend))
    try:
        got = [flow.step(frame, 0.1 * k) for k, frame in enumerate(frames)]
    finally:
        flow.close()
    assert sim.inputs == len(frames)  # one inference per frame
    assert sim.param_uploads <= 1  # the parameters stay resident for the whole stream
    for g, w in zip(got, want, strict=True):
        assert (g.valid, g.reason) == (w.valid, w.reason)
        assert (g.vx, g.vy, g.confidence) == pytest.approx((w.vx, w.vy, w.confidence), abs=1e-12)
    assert sum(g.valid for g in got) == len(frames) - 1


@pytest.mark.hardware
def test_on_an_attached_edge_tpu() -> None:
    """A real accelerator: the flow of a shifted photo within half a grid step (as on the twin)."""
    scene = scenes.photo("cat.bmp", 300)
    with OpticalFlow.from_template("gabor_64x64_p4", backend="edgetpu") as flow:
        a, b = scenes.shifted_pair(scene, 6.0, -4.0)
        result = flow.compute(a, b)
    assert result.valid and abs(result.vx - 6.0) <= 2.0 and abs(result.vy + 4.0) <= 2.0
