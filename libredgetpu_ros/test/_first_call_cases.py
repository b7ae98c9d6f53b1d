"""Each module that runs compiled kernels on its data path, opened as a node's configure opens it, with the
inputs its data path gets: shared by test_jit_warm_up.py (no numba specialization may appear after open) and
bench/bench_first_call.py (first call against the next ones). Runs in a child process: which kernels are
compiled is per-process state.

The inputs are the kinds a node hands over: a raw ``rgb8`` Image at the template's size is a read-only view
of the message's bytes (ros/image_msgs.py), a larger frame or another encoding a new array; the Edge TPU
backend's outputs are read-only views of the USB bytes (formats/layout.py ``relayout_output``), so every
backend's outputs are given read-only here (the CPU twin's are copies). numba compiles one specialization
per argument type, read-only and writable arrays included: a warm-up that misses one leaves a compile of
seconds on some robot's first frame.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Case:
    module: Any
    call: Callable[[Any], object]  # one frame (or one set_weights) through the data path
    inputs: Callable[[], list[Any]]  # made after the open is timed (and any setup a first frame needs)
    kernels: tuple[str, ...]  # dispatchers (module.function) the data path must find compiled at open


# every robotics module's camera-size frames (320x240 in frame_kinds) are shrunk by this kernel (fit_image)
RESIZE = "resize_kernels.area"


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view of a copy of ``array``'s bytes, as ``np.frombuffer`` on a message gives it."""
    view = np.frombuffer(np.ascontiguousarray(array).tobytes(), array.dtype).reshape(array.shape)
    assert not view.flags.writeable
    return view


def read_only_outputs(backend: Any) -> None:
    """``backend.run``'s outputs made read-only, as the Edge TPU backend's are."""
    run = backend.run

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        outputs = run(*args, **kwargs)
        return {name: read_only(value) for name, value in outputs.items()}

    backend.run = wrapped


def frame_kinds(frames: list[np.ndarray], mixed: bool) -> list[np.ndarray]:
    """Each frame as a read-only ``rgb8`` view at its size; when ``mixed``, each also as a new writable
    array, read-only at 320x240 (a camera larger than the template) and as a mono8 image becomes (three equal
    channels)."""
    import cv2

    if not mixed:
        return [read_only(frame) for frame in frames]
    out: list[np.ndarray] = []
    for frame in frames:
        gray = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        out += [read_only(frame), frame.copy(), read_only(cv2.resize(frame, (320, 240))),
                np.repeat(gray[:, :, None], 3, axis=2)]
    return out


def _scene(kind: str, n: int) -> list[np.ndarray]:
    from libredgetpu_ros.scenes import presets, textures

    size = (64, 64)
    if kind == "spot":
        wall = textures.natural(3, 256, color=True)
        return [f.image for f in presets.spot_scene((230, 30, 30), 12 * 64 / 320, wall, size=size,
                                                    velocity_px=(300, 0), frames=n)]
    if kind == "approach":
        return [f.image for f in presets.motion_scene("approach", textures.natural(4, 256), size=size,
                                                      frames=n)]
    return [f.image for f in presets.pan_scene(textures.natural(5, 1024, color=True), 60.0, size=size,
                                               frames=n)]


def _spot(variant: str, n: int, mixed: bool) -> Case:
    from libredgetpu_ros.robotics.spot import SpotTracker

    tracker = SpotTracker.from_template(64, variant, backend="cpu")
    read_only_outputs(tracker.runner.backend)
    kernels = ("spot_kernels.evidence", RESIZE) + (("image_kernels.luma",) if variant == "bright" else ())
    return Case(tracker, tracker.track, lambda: frame_kinds(_scene("spot", n), mixed), kernels)


def _looming(mode: str, n: int, mixed: bool) -> Case:
    from libredgetpu_ros.robotics.looming import LoomingDetector

    detector = LoomingDetector.from_template(64, backend="cpu", ttc_mode=mode)
    read_only_outputs(detector.runner.backend)
    stamps = itertools.count(0.0, 1 / 30)
    kernels = ("looming_kernels.border_correction", "looming_kernels.smooth",
               "looming_kernels.register_scale") if mode == "scale" else ()
    kernels += (RESIZE, "image_kernels.luma")  # a one-channel template: its runner warms the luma up
    return Case(detector, lambda f: detector.detect(f, next(stamps)),
                lambda: frame_kinds(_scene("approach", n), mixed), kernels)


def _flow(refine: bool, n: int, mixed: bool) -> Case:
    from libredgetpu_ros.robotics.flow import OpticalFlow

    flow = OpticalFlow.from_template("gabor_64x64_p4", backend="cpu", refine=refine)
    read_only_outputs(flow.runner.backend)
    kernels = ("flow_kernels.pool_features", "flow_kernels.stretch", RESIZE)
    if refine:
        kernels += ("flow_refine_kernels.refine_seed", "flow_refine_kernels.levels")
    return Case(flow, flow.step, lambda: frame_kinds(_scene("pan", n), mixed), kernels)


def _compass(n: int, mixed: bool) -> Case:
    from libredgetpu_ros.robotics.compass import VisualCompass

    compass = VisualCompass.from_template("gabor_64x64_p4", 60.0, backend="cpu")
    read_only_outputs(compass.flow.runner.backend)
    return Case(compass, compass.step, lambda: frame_kinds(_scene("pan", n), mixed),
                ("flow_kernels.pool_features", RESIZE))


def _pattern(n: int, mixed: bool) -> Case:
    from libredgetpu_ros.robotics.pattern import PatternTracker

    tracker = PatternTracker.from_template(64, 8, 1, backend="cpu")
    read_only_outputs(tracker.runner.backend)

    def inputs() -> list[np.ndarray]:
        frames = _scene("pan", n)
        tracker.set_template_at(frames[0], 28, 28)
        return frame_kinds(frames, mixed)

    return Case(tracker, tracker.track, inputs, (RESIZE,))


def _segment(n: int, mixed: bool) -> Case:
    import cv2
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

    pipeline = PerceptionPipeline.from_config(PipelineConfig(
        model=fixture("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"), backend="cpu"))
    for segment in pipeline._segments:
        read_only_outputs(segment.backend)

    def inputs() -> list[np.ndarray]:  # a 640x480 camera's rgb8 frames (read-only views either way)
        bgr = cv2.imread(str(fixture("images/grace_hopper.bmp")))
        image = cv2.resize(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (640, 480))
        return [read_only(np.roll(image, 16 * k, axis=1)) for k in range(n)]

    return Case(pipeline, pipeline.process, inputs, ("kernels._requantize", "kernels._resize_argmax"))


def _matmul(n: int, mixed: bool) -> Case:
    from libredgetpu_ros.matmul import MatMulEngine

    engine = MatMulEngine.from_template(1024, backend="cpu")

    def inputs() -> list[np.ndarray]:
        scale = engine.weight_range()[1][:, None]
        rng = np.random.default_rng(0)
        mats = [(rng.uniform(-0.9, 0.9, (1024, 1024)) * scale).astype(np.float32) for _ in range(n)]
        # the control node decodes a request with np.frombuffer (read-only); the API gets the caller's array
        return [read_only(m) if k % 2 == 0 or not mixed else m for k, m in enumerate(mats)]

    return Case(engine, engine.set_weights, inputs, ("fastpath._kernel",))


def _matmul_twin(n: int, mixed: bool) -> Case:
    from libredgetpu_ros.matmul import MatMulEngine

    engine = MatMulEngine.from_template(1024, backend="cpu")

    def inputs() -> list[np.ndarray]:  # float64, as the reservoir's state messages (np.frombuffer)
        rng = np.random.default_rng(1)
        xs = [rng.uniform(-1.0, 1.0, 1024) for _ in range(n)]
        return [read_only(x) if k % 2 == 0 or not mixed else x for k, x in enumerate(xs)]

    return Case(engine, engine.matmul, inputs, ("fastpath._twin",))


def _reservoir(n: int, mixed: bool) -> Case:
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.reservoir import ReservoirComputer, ReservoirConfig

    reservoir = ReservoirComputer(MatMulEngine.from_template(256, backend="cpu"),
                                  ReservoirConfig(input_dim=2, seed=5, washout=20))

    def inputs() -> list[np.ndarray]:  # float64 inputs, read-only as the node's messages decode them
        us = list(np.random.default_rng(2).uniform(-1.0, 1.0, (n, 2)))
        return [read_only(u) if k % 2 == 0 or not mixed else u for k, u in enumerate(us)]

    return Case(reservoir, reservoir.step, inputs, ("reservoir._fused_step",))


# name -> (frames, mixed kinds) -> Case; the module is opened when this is called
CASES: dict[str, Callable[[int, bool], Case]] = {
    "segment": _segment,
    "spot_red": lambda n, mixed: _spot("red", n, mixed),
    "spot_bright": lambda n, mixed: _spot("bright", n, mixed),
    "looming_scale": lambda n, mixed: _looming("scale", n, mixed),
    "looming_libredgetpu": lambda n, mixed: _looming("libredgetpu", n, mixed),
    "flow": lambda n, mixed: _flow(False, n, mixed),
    "flow_refined": lambda n, mixed: _flow(True, n, mixed),
    "compass": _compass,
    "pattern": _pattern,
    "matmul": _matmul,
    "matmul_twin": _matmul_twin,
    "reservoir": _reservoir,
}


def signatures() -> dict[str, set[str]]:
    """Every numba dispatcher of this package alive in the process (``module.function`` of its Python
    function, the package prefix cut) -> the argument types it holds compiled code for."""
    import sys

    if "numba" not in sys.modules:
        return {}
    from numba.core.dispatcher import Dispatcher

    out: dict[str, set[str]] = {}
    for obj in gc.get_objects():
        if isinstance(obj, Dispatcher) and obj.py_func.__module__.startswith("libredgetpu_ros."):
            name = f"{obj.py_func.__module__.rsplit('.', 1)[-1]}.{obj.py_func.__qualname__}"
            out.setdefault(name, set()).update(str(s) for s in obj.signatures)
    return out


def added(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, list[str]]:
    """The signatures ``after`` holds that ``before`` did not (compiled by the calls in between)."""
    return {name: sorted(sigs - before.get(name, set())) for name, sigs in after.items()
            if sigs - before.get(name, set())}
