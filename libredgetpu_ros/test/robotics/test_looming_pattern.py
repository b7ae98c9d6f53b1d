"""LoomingDetector and PatternTracker: LibrEdgeTPU's formulas on the same raw twin outputs, scenes with known
answers (approaching / receding / static texture; a photo patch found after known shifts), template swaps
landing at the sidecar's offsets (Edge TPU path on a double: no compiled PatternTracker file exists)."""

from __future__ import annotations

import itertools

import cv2
import numpy as np
import pytest
from libredgetpu_ros.errors import ImageError, ModelFormatError, WeightsError
from libredgetpu_ros.robotics.looming import LoomingDetector, TtcEstimator, compute_tau
from libredgetpu_ros.robotics.pattern import PatternTracker
from libredgetpu_ros.robotics.template import load_template

PATTERN_SHAPES = [(64, 8, 1), (64, 8, 3), (64, 16, 1), (128, 16, 1), (128, 16, 3), (128, 32, 1)]
SHIFTS = [(0, 0), (5, 0), (-6, 3), (4, -7), (-3, -3), (7, 6)]


def librEdgetpu_tau(zones: np.ndarray, epsilon: float = 1e-6) -> float:
    """LibrEdgeTPU ``LoomingDetector.compute_tau``, restated."""
    zones = np.asarray(zones).flatten()
    periphery_mean = np.mean(zones[[0, 1, 2, 3, 5, 6, 7, 8]])
    return float(zones[4] / max(periphery_mean, epsilon))


def librEdgetpu_ttc(tau_history: list[float], dt: float, min_samples: int = 3) -> float:
    """LibrEdgeTPU ``LoomingDetector.compute_ttc``, restated (inf where we say None)."""
    if dt <= 0 or len(tau_history) < min_samples:
        return float("inf")
    tau = np.array(tau_history)
    rate = (tau[-1] - tau[0]) / ((len(tau) - 1) * dt)
    if rate <= 0 or tau[-1] <= 1.0:
        return float("inf")
    return max(0.0, (2.0 - tau[-1]) / rate)


@pytest.fixture(scope="module")
def looming() -> LoomingDetector:
    detector = LoomingDetector.from_template(64, backend="cpu", window=5, ttc_mode="libredgetpu")
    yield detector
    detector.close()


_YY, _XX = np.mgrid[:64, :64]
_BACKGROUND = (((_XX // 4) + (_YY // 4)) % 2 * 50 + 100).astype(np.uint8)  # low-contrast texture


def _object_scene(half: float) -> np.ndarray:
    """A high-contrast textured square of half-size ``half`` in the centre zone over a low-contrast one."""
    image = _BACKGROUND.copy()
    mask = (np.abs(_XX - 31.5) < half) & (np.abs(_YY - 31.5) < half)
    image[mask] = (((_XX // 4) + (_YY // 4)) % 2 * 90 + 80)[mask]
    return image


def test_looming_decode_and_tau_equal_librEdgetpu(looming, fixture_path) -> None:
    """Zones = (q - zp) * scale of the raw twin output (exact, float32); tau to 1e-6 relative (LibrEdgeTPU
    averages in float32, we in float64)."""
    rng = np.random.default_rng(4)
    photo = cv2.cvtColor(cv2.imread(str(fixture_path("images/grace_hopper.bmp"))), cv2.COLOR_BGR2GRAY)
    images = [rng.integers(0, 256, (64, 64), dtype=np.uint8) for _ in range(10)]
    images += [cv2.resize(photo, (64, 64), interpolation=cv2.INTER_AREA), _object_scene(6)]
    spec = looming.template.output
    for image in images:
        outputs, _ = looming.runner.run([looming.model_input(image)])
        raw = outputs[spec.name].reshape(-1)
        ref_zones = (raw.astype(np.float32) - spec.zero_point) * np.float32(spec.scale)
        zones = looming.zones(image)
        np.testing.assert_array_equal(zones.reshape(-1), ref_zones)
        assert compute_tau(zones) == pytest.approx(librEdgetpu_tau(ref_zones), rel=1e-6)


def test_ttc_equals_librEdgetpu_for_uniform_stamps() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        taus = list(np.cumsum(rng.normal(0.05, 0.1, 8)) + rng.uniform(0.6, 1.6))
        estimator = TtcEstimator(window=8, min_samples=3)
        for i, tau in enumerate(taus):
            ours = estimator.update(0.05 * i, tau)
            ref = librEdgetpu_ttc(taus[: i + 1], 0.05)
            assert (ours is None and ref == float("inf")) or ours == pytest.approx(ref, rel=1e-9)


def _run(detector: LoomingDetector, halves: list[float], dt: float = 0.1):
    detector.ttc.reset()
    return [detector.detect(_object_scene(h), stamp_s=100.0 + dt * i) for i, h in enumerate(halves)]


def test_approaching_object_tau_rises_ttc_finite_and_falling(looming) -> None:
    results = _run(looming, [2, 3, 4, 5, 6, 7, 8, 9])
    taus = [r.tau for r in results]
    assert taus[-1] > 1 and taus[-1] > taus[0] and all(b >= a - 0.05 for a, b in itertools.pairwise(taus))
    ttcs = [r.ttc_s for r in results if r.ttc_s is not None]
    assert len(ttcs) >= 3 and all(np.isfinite(ttcs))
    assert all(b < a or b == 0.0 for a, b in itertools.pairwise(ttcs)) and ttcs[-1] < ttcs[0]


def test_receding_object_tau_falls_no_ttc(looming) -> None:
    results = _run(looming, [10, 9, 8, 7, 6, 5, 4, 3])
    taus = [r.tau for r in results]
    assert taus[-1] < taus[0] and all(b <= a + 0.05 for a, b in itertools.pairwise(taus))
    assert all(r.ttc_s is None for r in results)


def test_static_scene_no_ttc(looming) -> None:
    results = _run(looming, [6] * 6)
    assert len({r.tau for r in results}) == 1 and all(r.ttc_s is None for r in results)


def test_stamps_going_backwards_restart_the_history(looming) -> None:
    looming.ttc.reset()
    for i, h in enumerate([3, 4, 5, 6]):
        looming.detect(_object_scene(h), stamp_s=10 + 0.1 * i)
    assert looming.detect(_object_scene(7), stamp_s=1.0).ttc_s is None  # a bag looped: history restarted


def test_looming_bad_input(looming) -> None:
    with pytest.raises(ImageError, match="NaN"):
        looming.zones(np.full((64, 64), np.nan))
    with pytest.raises(Exception, match="odd square"):
        compute_tau(np.ones(8))


# --- pattern tracker ---------------------------------------------------------------------------------------
def _photo(fixture_path, size: int, channels: int) -> np.ndarray:
    rgb = cv2.cvtColor(cv2.imread(str(fixture_path("images/grace_hopper.bmp"))), cv2.COLOR_BGR2RGB)
    image = cv2.resize(rgb, (size, size), interpolation=cv2.INTER_AREA)
    return image if channels == 3 else cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)[:, :, None]


def _distinctive(image: np.ndarray, k: int) -> tuple[int, int]:
    """Top-left of the highest-contrast k x k patch in the central half (room for the shifts)."""
    size = image.shape[0]
    best = max((image[y:y + k, x:x + k].std(), x, y) for y in range(size // 4, size - size // 4 - k, 2)
                for x in range(size // 4, size - size // 4 - k, 2))
    return best[1], best[2]


@pytest.mark.parametrize(("search", "kernel", "channels"), PATTERN_SHAPES)
def test_tracker_finds_the_patch_after_known_shifts(search, kernel, channels, fixture_path, record_property):
    """Patch cut from a photo, set as template; the photo shifted by known offsets: error <= 2 px."""
    tracker = PatternTracker.from_template(search, kernel, channels, backend="cpu")
    try:
        image = _photo(fixture_path, search, channels)
        x, y = _distinctive(image, kernel)
        swap = tracker.set_template(tracker.cut_patch(image, x, y))
        assert swap.version == 1
        errors = []
        for dx, dy in SHIFTS:
            shifted = cv2.warpAffine(image, np.float32([[1, 0, dx], [0, 1, dy]]), (search, search),
                                     borderMode=cv2.BORDER_REFLECT).reshape(image.shape)
            match = tracker.track(shifted)
            assert match.result.version == 1
            errors.append(max(abs(match.x - (x + dx + (kernel - 1) / 2)),
                              abs(match.y - (y + dy + (kernel - 1) / 2))))
        record_property("max_error_px", max(errors))
        print(f"pattern {search}x{search} {kernel}x{kernel} {channels}ch: max error {max(errors):.2f} px")
        assert max(errors) <= 2.0
    finally:
        tracker.close()


def _double_blob(template) -> dict[str, np.ndarray]:
    """Stand-in for the missing compiled blob: the twin's filter at the sidecar's offsets, zeros elsewhere."""
    offsets = np.asarray(template.sidecar["conv_weight_offsets"])
    blob = np.zeros(int(offsets.max()) + 64, np.uint8)
    values = template.twin.buffer_data(template.conv_weights()).reshape(-1)
    blob[offsets] = values.view(np.uint8) ^ 0x80
    return {{"pc_params": "pc", "eo_params": "eo"}[template.sidecar["conv_weight_blob"]]: blob}


class _Recorder:
    name = "recorder"

    def __init__(self) -> None:
        self.staged: list = []

    def stage(self, parameters) -> None:
        self.staged.append(parameters)

    def run(self, inputs, parameters=None):
        raise AssertionError("not run here")

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("search", "kernel", "channels"), PATTERN_SHAPES)
def test_template_swap_lands_at_the_sidecar_offsets(search, kernel, channels) -> None:
    template = load_template(f"pattern_{search}x{search}_{kernel}x{kernel}_{channels}ch")
    recorder = _Recorder()
    tracker = PatternTracker(template, backend_object=recorder, blobs=_double_blob(template))
    rng = np.random.default_rng(search + kernel + channels)
    values = rng.integers(-128, 128, tracker.patch_shape(), dtype=np.int8)
    tracker.set_template_raw(values)
    params = tracker.runner.parameters
    blob = params.blob(tracker.blob_kind)
    offsets = np.asarray(template.sidecar["conv_weight_offsets"])
    np.testing.assert_array_equal((blob[offsets] ^ 0x80).view(np.int8), values.reshape(-1))  # round trip
    untouched = np.ones(blob.size, bool)
    untouched[offsets] = False
    assert not blob[untouched].any()
    np.testing.assert_array_equal(params.twin[template.conv_weights().index].reshape(values.shape), values)
    assert recorder.staged == [params]  # the device side saw the new version before it was published


def test_template_swap_on_the_twin_changes_what_is_found(fixture_path) -> None:
    tracker = PatternTracker.from_template(64, 8, 1, backend="cpu")
    try:
        image = _photo(fixture_path, 64, 1)
        first = _distinctive(image, 8)
        second = max((image[y:y + 8, x:x + 8].std(), x, y) for y in range(4, 52, 2) for x in range(4, 52, 2)
                     if max(abs(x - first[0]), abs(y - first[1])) >= 16)[1:]
        for x, y in (first, second, first):
            tracker.set_template(tracker.cut_patch(image, x, y))
            match = tracker.track(image)
            assert abs(match.x - (x + 3.5)) <= 2 and abs(match.y - (y + 3.5)) <= 2
        assert tracker.runner.parameters.version == 3
    finally:
        tracker.close()


@pytest.mark.parametrize(("patch", "error", "match"), [
    (np.zeros((16, 16), np.uint8), WeightsError, "shape"),
    (np.full((8, 8), 77, np.uint8), WeightsError, "flat"),
    (np.full((8, 8), np.nan), ImageError, "NaN"),
    (np.full((8, 8), -3.0), ImageError, "outside"),
    (np.zeros((8, 9, 3), np.uint8), WeightsError, "shape"),
])
def test_bad_templates_swap_nothing(patch, error, match) -> None:
    tracker = PatternTracker(load_template("pattern_64x64_8x8_1ch"), backend_object=_Recorder())
    before = tracker.runner.parameters
    with pytest.raises(error, match=match):
        tracker.set_template(patch)
    with pytest.raises(WeightsError):
        tracker.set_template_raw(np.zeros((8, 8), np.int16))
    assert tracker.runner.parameters is before


def test_pattern_has_no_edgetpu_file_and_says_so() -> None:
    from libredgetpu_ros.errors import ConfigError

    with pytest.raises(ConfigError, match="no compiled model"):
        PatternTracker.from_template(64, 8, 1, backend="edgetpu")


def test_sidecar_offsets_disagreeing_with_the_blob_are_refused() -> None:
    template = load_template("pattern_64x64_8x8_1ch")
    blobs = _double_blob(template)
    next(iter(blobs.values()))[template.sidecar["conv_weight_offsets"][0]] ^= 0x01
    with pytest.raises(ModelFormatError, match="conv_weight_offsets"):
        PatternTracker(template, backend_object=_Recorder(), blobs=blobs)


@pytest.mark.parametrize(("search", "kernel", "channels"), [(64, 8, 3), (128, 16, 1)])
def test_pattern_decode_equals_librEdgetpu_formula(search, kernel, channels, fixture_path) -> None:
    """Random images and a photo: offsets == LibrEdgeTPU's decode of one raw twin output (|d| <= 1e-6), in
    its mode (frames sent as they are, the soft argmax decoded alone)."""
    tracker = PatternTracker.from_template(search, kernel, channels, backend="cpu", mode="libredgetpu")
    try:
        image = _photo(fixture_path, search, channels)
        tracker.set_template(tracker.cut_patch(image, *_distinctive(image, kernel)))
        spec, dec = tracker.template.output, tracker.decoder
        rng = np.random.default_rng(6)
        frames = [rng.integers(0, 256, (search, search, channels), dtype=np.uint8) for _ in range(5)]
        for frame in [*frames, image]:
            outputs, _ = tracker.runner.run([tracker.model_input(frame)])
            device = outputs[spec.name].reshape(-1).view(np.uint8) ^ 0x80  # what the Edge TPU would return
            vals = (device ^ 0x80).view(np.int8).astype(np.float32)  # LibrEdgeTPU's INT8 branch
            offsets = (vals - spec.zero_point) * np.float32(spec.scale)
            ref = (float(offsets[0]) * dec.temperature, (float(offsets[1]) - dec.y_offset) * dec.temperature)
            result = tracker.track(frame).result
            assert (result.x_offset, result.y_offset) == pytest.approx(ref, abs=1e-6)
    finally:
        tracker.close()


@pytest.mark.parametrize(("change", "match"), [
    ("not json {", "not JSON"),
    ("[1, 2]", "JSON object"),
    ({"conv_weight_offsets": [-1, *range(1, 64)]}, "non-negative"),
    ({"conv_weight_offsets": [True, *range(1, 64)]}, "non-negative"),
    ({"conv_weight_offsets": list(range(63))}, "64 non-negative"),
    ({"conv_weight_offsets": [0] * 64}, "repeats"),
    ({"conv_weight_offsets": "0,1,2"}, "expected list"),
    ({"conv_weight_blob": "sa_params"}, "conv_weight_blob"),
    ({"temperature": "hot"}, "temperature"),
    ({"conv_weight_scale": 0.5}, "conv_weight_scale"),
    ({"kernel_height": 9}, "kernel_height"),
])
def test_hostile_pattern_sidecars_are_refused(tmp_path, change, match) -> None:
    import json
    import shutil

    src = load_template("pattern_64x64_8x8_1ch")
    shutil.copy(src.twin_path, tmp_path / src.twin_path.name)
    sidecar = tmp_path / src.sidecar_path.name
    sidecar.write_text(change if isinstance(change, str) else json.dumps(dict(src.sidecar, **change)))
    with pytest.raises(ModelFormatError, match=match):
        PatternTracker(load_template(tmp_path / src.twin_path.name), backend_object=_Recorder())


def test_oversized_sidecar_is_refused_before_reading(tmp_path) -> None:
    import shutil

    src = load_template("looming_64x64_3x3")
    shutil.copy(src.twin_path, tmp_path / src.twin_path.name)
    (tmp_path / src.sidecar_path.name).write_text(" " * (2 << 20))
    with pytest.raises(ModelFormatError, match="larger than the 1048576"):
        load_template(tmp_path / src.twin_path.name)


def test_looming_on_the_edgetpu_path_with_scripted_device_bytes() -> None:
    """The real driver over the recording transport double; the scripted accelerator answers each run with
    known uint8 zone bytes in the output layer's tiled layout: zones = (q - zp) * scale; tau, TTC follow."""
    from libredgetpu_ros.backends.edgetpu import EdgeTpuBackend
    from libredgetpu_ros.edgetpu.simulated import SimulatedAccelerator
    from libredgetpu_ros.edgetpu.transport import RecordingTransport
    from libredgetpu_ros.formats.layout import tile_output

    template = load_template("looming_64x64_3x3")
    layer = template.package().execution_only.output_layers[0]
    answers = [np.array([4, 4, 4, 4, 4 + 2 * i, 4, 4, 4, 4], np.uint8) for i in range(5)]

    class Scripted(SimulatedAccelerator):
        def __call__(self, call):
            if call.kind == "bulk_write" and call.length == 8 and call.data is not None and call.data[4] == 1:
                self.queue_output(tile_output(answers.pop(0).reshape(1, 1, 9), layer).tobytes())
            return super().__call__(call)

    backend = EdgeTpuBackend(transport=RecordingTransport(Scripted(), bus_path="test-looming-xor",
                                                          keep_payloads=False))
    backend.load(template.compiled_path, template.twin_path)
    detector = LoomingDetector(template, backend_object=backend, window=5, ttc_mode="libredgetpu")
    try:
        spec = template.output
        results = [detector.detect(np.zeros((64, 64), np.uint8), 10.0 + 0.1 * i) for i in range(5)]
        for i, result in enumerate(results):
            want = (np.array([4, 4, 4, 4, 4 + 2 * i, 4, 4, 4, 4], np.float32) - spec.zero_point) \
                * np.float32(spec.scale)
            np.testing.assert_array_equal(result.zones.reshape(-1), want)
            assert result.tau == pytest.approx((4 + 2 * i) / 4)
        assert [r.ttc_s is None for r in results] == [True, True, False, False, False]
        assert results[2].ttc_s == pytest.approx(0.0) and results[1].tau == pytest.approx(1.5)
    finally:
        detector.close()


@pytest.mark.parametrize("zones", [-3, float("nan"), "3", 3.0, True, 10**30])
def test_a_bad_zones_field_in_the_sidecar_is_a_typed_error(tmp_path, zones) -> None:
    """Issue 30 item 5: sidecar ``zones`` -3 passed the shape check ((-3)^2 = 9) and failed later in a
    reshape, NaN raised ValueError from int(): now a ModelFormatError naming the field (the flow template's
    ``ksize`` is read the same way)."""
    import json
    import shutil

    from libredgetpu_ros.errors import ModelFormatError
    from libredgetpu_ros.robotics.template import template_files

    _, twin, sidecar = template_files("looming_64x64_3x3")
    shutil.copy(twin, tmp_path / twin.name)
    fields = json.loads(sidecar.read_text())
    (tmp_path / sidecar.name).write_text(json.dumps({**fields, "zones": zones}))
    template = load_template(tmp_path / twin.name)
    with pytest.raises(ModelFormatError, match=r"field 'zones' is .*, expected an integer in 1\.\.255"):
        LoomingDetector(template, backend="cpu")


@pytest.mark.parametrize("bad", [{"contact_tau": 1.0}, {"min_samples": 0}, {"max_gap_s": -1.0}])
def test_a_refused_looming_setting_leaves_no_backend_open(monkeypatch, bad) -> None:
    """The runner (on an Edge TPU: the device and a broker stream) is opened after every setting is
    checked: a refusal used to leave it open until the process exited."""
    from libredgetpu_ros.robotics import looming

    opened: list[object] = []

    class Counting(looming.TemplateRunner):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)

    monkeypatch.setattr(looming, "TemplateRunner", Counting)
    from libredgetpu_ros.errors import ConfigError

    with pytest.raises(ConfigError, match=next(iter(bad))):
        LoomingDetector(load_template("looming_64x64_3x3"), backend="cpu", **bad)
    assert opened == []
