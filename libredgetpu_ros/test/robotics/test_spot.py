"""SpotTracker: decode vs LibrEdgeTPU's formula, colour swaps byte-exact against the compiled colour variants,
the Edge TPU path's int8 XOR on scripted device bytes, scenes with known answers, bad input."""

from __future__ import annotations

import itertools
import json
import shutil

import cv2
import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError, ImageError, ModelFormatError, WeightsError
from libredgetpu_ros.robotics.spot import COLOR_PRESETS, SpotTracker
from libredgetpu_ros.robotics.template import load_template

COLORS = tuple(COLOR_PRESETS)


def librEdgetpu_decode(device_bytes: bytes, scale: float, zero_point: int, temperature: float,
                       y_offset: float) -> tuple[float, float]:
    """LibrEdgeTPU 0.x ``EdgeTPUModelBase._decode_tracker_output`` for an INT8 output, restated: the device's
    uint8 bytes XOR 0x80 as int8, dequantized in float32, y_offset removed, times the temperature."""
    out_uint8 = np.frombuffer(device_bytes, dtype=np.uint8)[:2]
    vals = (out_uint8 ^ 0x80).view(np.int8).astype(np.float32)
    offsets = (vals - zero_point) * scale
    return float(offsets[0]) * temperature, (float(offsets[1]) - y_offset) * temperature


@pytest.fixture(scope="module")
def red() -> SpotTracker:
    tracker = SpotTracker.from_template(64, "red", backend="cpu")
    yield tracker
    tracker.close()


def _spot_scene(cx: float, cy: float, rgb=(255, 255, 255), size=64, radius=4) -> np.ndarray:
    img = np.zeros((size, size, 3), np.uint8)
    cv2.circle(img, (round(cx), round(cy)), radius, rgb, -1)
    return img


def _photos(fixture_path) -> list[np.ndarray]:
    out = []
    for name in ("images/grace_hopper.bmp", "images/cat.bmp", "robotics/embedding/dog_train_0.bmp"):
        bgr = cv2.imread(str(fixture_path(name)))
        out.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    return out


@pytest.mark.parametrize("variant", ["bright", "red", "white"])
def test_decode_equals_librEdgetpu_formula_on_twin_outputs(variant, fixture_path) -> None:
    """Random and real images: our offsets == LibrEdgeTPU's decode of one raw twin output, |d| <= 1e-6 (its
    mode; the checked mode keeps the same reading in ``measured``)."""
    rng = np.random.default_rng(1)
    tracker = SpotTracker.from_template(64, variant, backend="cpu", mode="libredgetpu")
    checked = SpotTracker.from_template(64, variant, backend="cpu")
    try:
        spec, dec = tracker.template.output, tracker.decoder
        images = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(20)]
        images += _photos(fixture_path) + [_spot_scene(10 + 4 * i, 50 - 3 * i) for i in range(10)]
        seen = set()
        for image in images:
            result = tracker.track(image)
            outputs, _ = tracker.runner.run([tracker.model_input(image)])
            raw = outputs[spec.name].reshape(-1)
            assert tuple(int(v) for v in raw) == result.raw
            device = (raw.view(np.uint8) ^ 0x80).tobytes()  # what the Edge TPU would return
            ref = librEdgetpu_decode(device, spec.scale, spec.zero_point, dec.temperature, dec.y_offset)
            assert result.x_offset == pytest.approx(ref[0], abs=1e-6)
            assert result.y_offset == pytest.approx(ref[1], abs=1e-6)
            assert result.valid and result.reason == "unchecked"
            assert checked.track(image).measured == (result.x_offset, result.y_offset)
            seen.add(result.raw)
        assert len(seen) > 10  # the scenes really produce different outputs
    finally:
        tracker.close()
        checked.close()


def test_twin_run_equals_litert_on_the_uncompiled_model(red) -> None:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(red.template.twin_path))
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    rng = np.random.default_rng(2)
    for _ in range(5):
        image = rng.integers(0, 256, (1, 64, 64, 3), dtype=np.uint8)
        interp.set_tensor(inp["index"], image)
        interp.invoke()
        assert red.track(image[0]).raw == tuple(int(v) for v in interp.get_tensor(out["index"]).reshape(-1))


@pytest.mark.parametrize(("loaded", "target"), list(itertools.permutations(COLORS, 2)))
def test_color_swap_gives_the_compiled_bytes(loaded, target) -> None:
    """Every ordered pair: same filter scale -> exactly the target's compiled PARAMETER_CACHING blob;
    otherwise the nearest values on the loaded scale, every other byte unchanged. Scales: from the model."""
    a = load_template(f"color_{loaded}_64x64")
    b = load_template(f"color_{target}_64x64")
    scale_a = a.weight_scale(a.conv_weights())
    scale_b = b.weight_scale(b.conv_weights())
    tracker = SpotTracker(a, backend_object=_Recorder())
    swap = tracker.set_color(COLOR_PRESETS[target])
    new_pc = tracker.runner.parameters.blob("pc")
    pc_a, pc_b = a.blobs()["pc"], b.blobs()["pc"]
    if scale_a == scale_b:
        np.testing.assert_array_equal(new_pc, pc_b)
    expected = np.clip(np.rint(np.array(COLOR_PRESETS[target]) / scale_a), -128, 127).astype(np.int8)
    assert (new_pc[:3] ^ 0x80).view(np.int8).tolist() == expected.tolist() == list(swap.weights)
    np.testing.assert_array_equal(new_pc[3:], pc_a[3:])
    assert swap.scale == scale_a and swap.version == 1
    twin = tracker.runner.parameters.twin[a.conv_weights().index]
    assert twin.reshape(-1).tolist() == expected.tolist()
    if scale_a != scale_b:  # the sidecars claim 1/127 everywhere: the model is what counts
        assert not np.isclose(scale_b, a.sidecar["color_weight_scale"]) or not np.isclose(
            scale_a, a.sidecar["color_weight_scale"])


@pytest.mark.parametrize("target", COLORS)
def test_color_swap_128_red(target) -> None:
    t = load_template("color_red_128x128")
    tracker = SpotTracker(t, backend_object=_Recorder())
    tracker.set_color(COLOR_PRESETS[target])
    pc = tracker.runner.parameters.blob("pc")
    scale = t.weight_scale(t.conv_weights())
    expected = np.clip(np.rint(np.array(COLOR_PRESETS[target]) / scale), -128, 127).astype(np.int8)
    assert (pc[:3] ^ 0x80).view(np.int8).tolist() == expected.tolist()
    np.testing.assert_array_equal(pc[3:], t.blobs()["pc"][3:])
    np.testing.assert_array_equal(tracker.runner.parameters.blob("eo"), t.blobs()["eo"])
    if scale == load_template(f"color_{target}_64x64").weight_scale(load_template(
            f"color_{target}_64x64").conv_weights()):
        assert pc[:3].tolist() == load_template(f"color_{target}_64x64").blobs()["pc"][:3].tolist()


def test_swapped_twin_equals_the_target_twin(fixture_path) -> None:
    """After red -> green the CPU twin gives the green template's outputs (same scale: the same model)."""
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for _ in range(5)] + _photos(fixture_path)
    swapped = SpotTracker.from_template(64, "red", backend="cpu")
    green = SpotTracker.from_template(64, "green", backend="cpu")
    try:
        before = [swapped.track(i).raw for i in images]
        swapped.set_color(COLOR_PRESETS["green"])
        after = [swapped.track(i) for i in images]
        assert [r.version for r in after] == [1] * len(images)
        # the output quantization of the loaded (red) model stays; the green template's own output scale
        # differs, so compare the decoded offsets to one output LSB
        lsb = swapped.template.output.scale * swapped.decoder.temperature
        for r, g in zip(after, (green.track(i) for i in images), strict=True):
            for a, b in zip(r.measured, g.measured, strict=True):
                assert abs(a - b) <= 1.01 * lsb + green.template.output.scale * 0.1
            assert (r.valid, r.reason) == (g.valid, g.reason)  # the check runs on the swapped filter
        assert before != [r.raw for r in after]
    finally:
        swapped.close()
        green.close()


class _Recorder:
    """Backend double: records the parameter sets it is asked to prepare/run; returns a fixed output."""

    name = "recorder"

    def __init__(self) -> None:
        self.staged: list = []
        self.runs: list = []

    def stage(self, parameters) -> None:
        self.staged.append(parameters)

    def run(self, inputs, parameters=None):
        self.runs.append(parameters)
        return {}

    def describe(self):
        return {"backend": self.name}

    def close(self) -> None:
        pass


# --- the Edge TPU path on scripted device bytes (the real driver over the recording transport double) -----
def _scripted_backend(template, answers: list[np.ndarray], bus: str):
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend
    from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
    from libredgetpu_ros.edgetpu.transport import RecordingTransport
    from libredgetpu_ros.formats.layout import tile_output

    layer = template.package().execution_only.output_layers[0]

    class Scripted(SimulatedAccelerator):
        """Queues the next answer (int8 values as the device's XOR-0x80 bytes) when an input message starts;
        counts parameter messages (tag 2 headers)."""

        def __init__(self) -> None:
            super().__init__()
            self.param_uploads = 0

        def __call__(self, call):
            header = call.kind == "bulk_write" and call.length == 8 and call.data is not None
            if header and call.data[4] == 2:
                self.param_uploads += 1
            if header and call.data[4] == 1:
                values = answers.pop(0)
                device = (values.view(np.uint8) ^ 0x80).reshape(1, 1, 2)
                self.queue_output(tile_output(device, layer).tobytes())
            return super().__call__(call)

    sim = Scripted()
    backend = EdgeTpuBackend(transport=RecordingTransport(sim, bus_path=bus, keep_payloads=False))
    backend.load(template.compiled_path, template.twin_path)
    return backend, sim


def test_edgetpu_int8_output_xor_and_reupload_per_version() -> None:
    template = load_template("color_red_64x64")
    answers = [np.array(v, np.int8) for v in ([-97, -11], [12, 46], [127, -128], [-42, 43])]
    expected = list(answers)
    backend, sim = _scripted_backend(template, answers, "test-spot-xor")
    tracker = SpotTracker(template, backend_object=backend)
    try:
        spec, dec = template.output, tracker.decoder
        image = np.zeros((64, 64, 3), np.uint8)
        results = [tracker.track(image), tracker.track(image)]
        assert sim.param_uploads == 1  # cached: one upload for two frames
        tracker.set_color(COLOR_PRESETS["blue"])  # version 1: uploaded before it is published
        assert sim.param_uploads == 2
        results += [tracker.track(image), tracker.track(image)]
        assert sim.param_uploads == 2  # the new version stays resident
        for result, values in zip(results, expected, strict=True):
            assert result.raw == tuple(int(v) for v in values)
            device = (values.view(np.uint8) ^ 0x80).tobytes()
            ref = librEdgetpu_decode(device, spec.scale, spec.zero_point, dec.temperature, dec.y_offset)
            assert result.measured == pytest.approx(ref, abs=1e-6)
            assert not result.valid and result.reason == "no_target"  # a black frame: nothing to follow
        assert [r.version for r in results] == [0, 0, 1, 1]
    finally:
        tracker.close()


# --- scenes with known answers -----------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["bright", "red"])
def test_moving_target_gives_servo_error_sign_and_magnitude(variant) -> None:
    tracker = SpotTracker.from_template(64, variant, backend="cpu")
    rgb = (255, 255, 255) if variant == "bright" else (255, 0, 0)
    try:
        centre = tracker.track(_spot_scene(31.5, 31.5, rgb))
        assert abs(centre.x_offset) < 0.08 and abs(centre.y_offset) < 0.08 and centre.direction() == "center"
        for dx, dy, direction in ((-20, 0, "left"), (20, 0, "right"), (0, -20, "up"), (0, 20, "down"),
                                  (15, 15, "down-right")):
            result = tracker.track(_spot_scene(31.5 + dx, 31.5 + dy, rgb))
            want_x, want_y = dx / 31.5, dy / 31.5
            assert result.x_offset == pytest.approx(want_x, abs=0.1)
            assert result.y_offset == pytest.approx(want_y, abs=0.1)
            ex, ey = result.servo_error(gain=2.0)
            for error, shift in ((ex, dx), (ey, dy)):
                assert np.sign(error) == -np.sign(shift) if shift else abs(error) < 0.2
            assert result.direction() == direction
        # a distractor of another colour does not pull the colour tracker
        if variant == "red":
            scene = _spot_scene(10, 10, (255, 0, 0))
            cv2.circle(scene, (50, 50), 6, (0, 255, 0), -1)
            result = tracker.track(scene)
            assert result.x_offset < -0.5 and result.y_offset < -0.5
    finally:
        tracker.close()


def test_resize_and_gray_conversion(red) -> None:
    big = cv2.resize(_spot_scene(50, 14, (255, 0, 0)), (256, 256), interpolation=cv2.INTER_NEAREST)
    result = red.track(big)
    assert result.x_offset == pytest.approx((50 - 31.5) / 31.5, abs=0.1)
    bright = SpotTracker.from_template(64, "bright", backend="cpu", resize=False)
    try:
        assert bright.track(_spot_scene(50, 31.5)).x_offset > 0.4  # RGB given to a gray template: luma
        with pytest.raises(ImageError, match="resizing is off"):
            bright.track(np.zeros((48, 64), np.uint8))
    finally:
        bright.close()


# --- bad input ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("image", "match"), [
    (np.zeros((64, 64), np.uint8), "needs RGB"),
    (np.full((64, 64, 3), np.nan, np.float32), "NaN"),
    (np.full((64, 64, 3), 300.0), "outside"),
    (np.zeros((64, 64, 4), np.uint8), "shape"),
    (np.array(["a"]), "dtype"),
])
def test_bad_images_are_refused(red, image, match) -> None:
    with pytest.raises(ImageError, match=match):
        red.track(image)


@pytest.mark.parametrize(("rgb", "error", "match"), [
    ((1.0, 0.0), WeightsError, "3 weights"),
    ((float("nan"), 0.0, 0.0), WeightsError, "nan"),
    ((0.0, float("inf"), 0.0), WeightsError, "inf"),
])
def test_bad_colours_swap_nothing(rgb, error, match) -> None:
    tracker = SpotTracker(load_template("color_red_64x64"), backend_object=_Recorder())
    before = tracker.runner.parameters
    with pytest.raises(error, match=match):
        tracker.set_color(rgb)
    assert tracker.runner.parameters is before


def test_out_of_range_colour_is_clipped_and_reported() -> None:
    tracker = SpotTracker(load_template("color_white_64x64"), backend_object=_Recorder())
    swap = tracker.set_color((1.0, -0.5, 0.1))
    assert swap.clipped == 2 and swap.weights[:2] == (127, -128)


def test_a_refused_upload_keeps_the_old_colour() -> None:
    class Refusing(_Recorder):
        def stage(self, parameters) -> None:
            raise WeightsError("device refused")

    tracker = SpotTracker(load_template("color_red_64x64"), backend_object=Refusing())
    before = tracker.runner.parameters
    with pytest.raises(WeightsError):
        tracker.set_color(COLOR_PRESETS["blue"])
    assert tracker.runner.parameters is before and tracker.color[0] > 0.9


def test_bright_template_has_no_colour() -> None:
    tracker = SpotTracker(load_template("bright_64x64"), backend_object=_Recorder())
    with pytest.raises(ConfigError, match="brightness"):
        tracker.set_color((1.0, 0.0, 0.0))


@pytest.mark.parametrize(("field", "value"), [("output_scale", 0.5), ("output_zero_point", 3),
                                              ("height", 32), ("channels", 1)])
def test_sidecar_disagreeing_with_the_model_names_the_field(tmp_path, field, value) -> None:
    src = load_template("color_red_64x64")
    for path in (src.compiled_path, src.twin_path):
        shutil.copy(path, tmp_path / path.name)
    sidecar = dict(src.sidecar, **{field: value})
    (tmp_path / src.sidecar_path.name).write_text(json.dumps(sidecar))
    with pytest.raises(ModelFormatError, match=f"field '{field}'"):
        load_template(tmp_path / src.twin_path.name)


def test_sidecar_missing_temperature(tmp_path) -> None:
    src = load_template("bright_64x64")
    shutil.copy(src.twin_path, tmp_path / src.twin_path.name)
    sidecar = {k: v for k, v in src.sidecar.items() if k != "temperature"}
    (tmp_path / src.sidecar_path.name).write_text(json.dumps(sidecar))
    with pytest.raises(ModelFormatError, match="'temperature' missing"):
        SpotTracker(load_template(tmp_path / src.twin_path.name), backend="cpu")


def test_compiled_filter_disagreeing_with_the_twin_is_refused(tmp_path) -> None:
    """The colour swap patches PARAMETER_CACHING bytes 0..2: a compiled model whose bytes there are not the
    twin's filter is refused at load (a swap would write the wrong place)."""
    from libredgetpu_ros.reparam import view_offset

    src = load_template("color_red_64x64")
    data = bytearray(src.compiled.data)
    data[view_offset(src.compiled.data, src.blobs()["pc"])] ^= 0x01  # the R weight's byte, one bit off
    (tmp_path / src.compiled_path.name).write_bytes(bytes(data))
    for path in (src.twin_path, src.sidecar_path):
        shutil.copy(path, tmp_path / path.name)
    with pytest.raises(ModelFormatError, match="do not hold the colour filter"):
        SpotTracker(load_template(tmp_path / src.twin_path.name), backend_object=_Recorder())


def test_huge_colour_weights_are_clipped_not_an_overflow() -> None:
    """Issue 30 item 1: r = 1e308 (w / scale overflows to inf) raised OverflowError in quantize_color and
    killed the tracker node; now clipped to the filter's range and reported like any out-of-range weight."""
    tracker = SpotTracker(load_template("color_red_64x64"), backend_object=_Recorder())
    swap = tracker.set_color((1e308, -1e308, 1.5e306))
    assert swap.weights == (127, -128, 127) and swap.clipped == 3
    swap = tracker.set_color((-1e-320, 0.0, -128.5 * tracker.filter_scale))  # half to even: -128, in range
    assert swap.weights == (0, 0, -128) and swap.clipped == 0
