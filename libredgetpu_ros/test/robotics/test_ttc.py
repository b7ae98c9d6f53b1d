"""Time to contact in seconds (robotics/ttc.py through LoomingDetector's scale mode) against rendered
approaches whose truth is known (libredgetpu_ros/scenes, docs/scenes.md): 64x64 looming template on its
CPU twin, 30 Hz, noise sigma 2, natural textures with and without a background; static, lateral and
receding scenes; gaps and stamps going backwards."""

from __future__ import annotations

import math

import numpy as np
import pytest
from libredgetpu_ros.robotics.looming import LoomingDetector
from libredgetpu_ros.robotics.ttc import ScaleTtc, TtcSettings
from libredgetpu_ros.scenes import presets, textures

TUNING_TEXTURES = ("natural", "astronaut", "brick", "grace_hopper")


def _texture(name: str) -> np.ndarray:
    return textures.natural(7, 256) if name == "natural" else textures.photo(name, 256, gray=True)


@pytest.fixture(scope="module")
def detector():
    with LoomingDetector.from_template(64, backend="cpu") as d:
        yield d


def _run(detector: LoomingDetector, frames) -> list:
    detector.reset()
    return [detector.detect(f.image, f.stamp_s) for f in frames]


def _approach_stats(detector: LoomingDetector, names: tuple[str, ...]) -> tuple[float, float, int]:
    """(share of frames with truth TTC in [0.5, 3] s that got a TTC, median relative error, frames)."""
    errors, total = [], 0
    for name in names:
        for target_m in (None, 1.5):  # an endless wall / a 1.5 m square in front of a backdrop
            frames = presets.motion_scene("approach", _texture(name), target_m=target_m, noise=2.0, seed=3)
            for frame, result in zip(frames, _run(detector, frames), strict=True):
                if 0.5 <= frame.truth.ttc_s <= 3.0:
                    total += 1
                    if result.ttc_s is not None:
                        assert result.ttc_valid and result.ttc_reason == "ok"
                        errors.append(abs(result.ttc_s - frame.truth.ttc_s) / frame.truth.ttc_s)
    return len(errors) / total, float(np.median(errors)), total


def test_approach_from_5m_at_1mps_gives_ttc_in_seconds(detector) -> None:
    share, median, total = _approach_stats(detector, TUNING_TEXTURES)
    print(f"tuning textures: TTC on {share:.3f} of {total} frames, median relative error {median:.4f}")
    assert share >= 0.5 and median <= 0.3


@pytest.mark.slow
def test_approach_on_held_out_photos(detector) -> None:
    share, median, total = _approach_stats(detector, textures.HELD_OUT_PHOTOS)
    print(f"held-out photos: TTC on {share:.3f} of {total} frames, median relative error {median:.4f}")
    assert share >= 0.5 and median <= 0.3


@pytest.mark.parametrize("kind", ["static", "lateral", "recede"])
def test_no_contact_coming_gives_no_ttc(detector, kind) -> None:
    """A finite TTC on at most 2 % of the frames of scenes with no contact coming."""
    finite = total = 0
    for name in TUNING_TEXTURES:
        for target_m in (None, 1.5):
            start = 1.0 if kind == "recede" else 3.0
            frames = presets.motion_scene(kind, _texture(name), target_m=target_m, noise=2.0, seed=4,
                                          start_m=start, frames=60)
            results = _run(detector, frames)
            finite += sum(r.ttc_s is not None for r in results)
            total += len(results)
            assert all(r.ttc_reason in ("filling", "not_approaching", "poor_fit", "low_texture", "ok")
                       for r in results)
    print(f"{kind}: finite TTC on {finite} of {total} frames")
    assert finite <= 0.02 * total


def test_a_gap_gives_no_ttc_until_the_history_refills(detector) -> None:
    frames = presets.motion_scene("approach", _texture("natural"), noise=2.0, frames=90, gaps={45: 2.0})
    results = _run(detector, frames)
    settings = detector.scale_ttc.settings
    assert results[44].ttc_s is not None  # approaching, history full
    resumed = frames[45].stamp_s
    for frame, result in zip(frames[45:], results[45:], strict=True):
        if frame.stamp_s - resumed < settings.min_span_s:
            assert result.ttc_s is None and result.ttc_reason == "filling"
    assert results[-1].ttc_s == pytest.approx(frames[-1].truth.ttc_s, rel=0.1)


def test_stamps_going_backwards_restart_the_history(detector) -> None:
    frames = presets.motion_scene("approach", _texture("natural"), noise=2.0, frames=20)
    results = _run(detector, frames)
    assert results[-1].ttc_s is not None
    again = detector.detect(frames[-1].image, frames[0].stamp_s)  # a bag looped
    assert again.ttc_s is None and again.ttc_reason == "filling" and detector.samples == 1


def test_flat_frames_have_no_texture_and_no_stamp_means_no_ttc(detector) -> None:
    detector.reset()
    for i in range(10):
        result = detector.detect(np.full((64, 64, 3), 90, np.uint8), 0.1 * i)
    assert result.ttc_s is None and result.ttc_reason == "low_texture"
    assert detector.detect(np.zeros((64, 64, 3), np.uint8)).ttc_reason == "no_stamp"


def test_the_model_ttc_is_span_over_scale_minus_one() -> None:
    """Noise-free endless wall: every TTC under 3 s within 3 % of the truth once the history spans
    min_span (further away the expansion over 0.3 s is under 10 %, and the error grows)."""
    estimator = ScaleTtc(TtcSettings())
    frames = presets.motion_scene("approach", _texture("natural"), noise=0.0, frames=120)
    import cv2

    for frame in frames:
        gray = cv2.resize(frame.gray(), (64, 64), interpolation=cv2.INTER_AREA)
        estimate = estimator.update(gray, frame.stamp_s)
        if estimate.span_s is not None and estimate.span_s >= 0.1 and frame.truth.ttc_s <= 3.0:
            assert estimate.ttc_s == pytest.approx(frame.truth.ttc_s, rel=0.03)
            assert estimate.ttc_s == pytest.approx(estimate.span_s / (estimate.scale - 1.0))
    assert math.isfinite(estimate.ttc_s)


@pytest.mark.slow
@pytest.mark.parametrize(("label", "effects"), [
    ("noise 5", {"noise": 5.0}), ("blur 1.5", {"blur": 1.5}), ("flicker 10 %", {"flicker": 0.1}),
    ("2 m/s", {"speed": 2.0})])
def test_ttc_per_condition(detector, label, effects) -> None:
    """The tolerances docs/robotics.md quotes per condition: approaches on the tuning textures (with and
    without a backdrop) and the same textures static."""
    errors, total, finite, still = [], 0, 0, 0
    for name in TUNING_TEXTURES:
        for target_m in (None, 1.5):
            options = {"noise": 2.0, "seed": 3, **effects}
            frames = presets.motion_scene("approach", _texture(name), target_m=target_m, **options)
            for frame, result in zip(frames, _run(detector, frames), strict=True):
                if 0.5 <= frame.truth.ttc_s <= 3.0:
                    total += 1
                    if result.ttc_s is not None:
                        errors.append(abs(result.ttc_s - frame.truth.ttc_s) / frame.truth.ttc_s)
            options.pop("speed", None)
            frames = presets.motion_scene("static", _texture(name), target_m=target_m, start_m=3.0, frames=60,
                                          **options)
            finite += sum(r.ttc_s is not None for r in _run(detector, frames))
            still += len(frames)
    share, median = len(errors) / total, float(np.median(errors))
    print(f"{label}: TTC on {share:.2f} of {total}, median relative error {median:.3f}, 90th percentile "
          f"{np.percentile(errors, 90):.3f}; static: finite on {finite} of {still}")
    assert share >= 0.45 and median <= 0.3 and finite <= 0.02 * still


@pytest.mark.parametrize("size", [64, 128])
def test_border_response_removed_from_the_zones(size) -> None:
    """A uniform frame lights the top and left zones through the SAME padding (LibrEdgeTPU's zones: up to 21
    output levels at white); the scale mode's zones are 0 within half an output level, and the zones away
    from the top and left border are the device's own."""
    with LoomingDetector.from_template(size, backend="cpu") as corrected, \
            LoomingDetector.from_template(size, backend="cpu", ttc_mode="libredgetpu") as raw:
        level = float(corrected.template.output.scale)
        for grey in (64, 128, 200, 255):
            frame = np.full((size, size), grey, np.uint8)
            assert raw.detect(frame).zones[0, 0] >= level  # the border effect is there
            assert corrected.detect(frame).zones.max() <= 0.5 * level
        textured = np.rint(textures.natural(1, size)).astype(np.uint8)
        a, b = corrected.detect(textured).zones, raw.detect(textured).zones
        np.testing.assert_array_equal(a[1:, 1:], b[1:, 1:])
        assert a[0, 0] < 0.8 * b[0, 0]  # the top-left zone holds both border rows: its density was inflated


@pytest.mark.parametrize("size", [64, 128])
def test_compiled_border_correction_equals_the_numpy_one(size) -> None:
    """robotics/looming_kernels.py (one loop over the ring pixels, the decode and the floor in the same call)
    gives the NumPy path's corrected zones, on the device's own outputs and on random ones."""
    from libredgetpu_ros.robotics.looming_border import BorderCorrection

    with LoomingDetector.from_template(size, backend="cpu") as detector:
        fast = detector.border
        slow = BorderCorrection(detector.template, detector.zones_per_side, kernels=False)
        if not fast.kernels:
            pytest.skip("numba is not installed: the NumPy path is the only one")
        rng = np.random.default_rng(2)
        frames = [np.full((size, size), g, np.uint8) for g in (0, 1, 128, 255)]
        frames += [np.rint(textures.natural(s, size)).astype(np.uint8) for s in range(4)]
        frames += [rng.integers(0, 256, (size, size), dtype=np.uint8) for _ in range(4)]
        name = detector.template.output.name
        for frame in frames:
            fitted = detector.fit(frame)
            raw = detector.runner.run([fitted[None]])[0][name]
            for output in (raw, rng.integers(0, 256, raw.shape, dtype=np.uint8)):
                expected = slow.zones(output, fitted)
                np.testing.assert_array_equal(fast.zones(output, fitted), expected)
                np.testing.assert_array_equal(slow.apply(detector.decode(output), fitted), expected)


def test_compiled_registration_equals_the_numpy_one() -> None:
    """robotics/looming_kernels.register_scale (a separable warp, float32 lanes, exact bilinear weights)
    against ttc.register_scale (cv2.remap, float32 sums) on rendered pairs of every kind of motion: the same
    scale within 1e-4, standard error and residual within 2 %, the same share of pixels kept within 1e-3."""
    import cv2
    from libredgetpu_ros.robotics import looming_kernels
    from libredgetpu_ros.robotics.ttc import register_scale

    if not looming_kernels.warm_up():
        pytest.skip("numba is not installed: the NumPy path is the only one")
    for kind in ("approach", "recede", "lateral", "static"):
        frames = presets.motion_scene(kind, _texture("brick"), target_m=1.5, start_m=3.0, frames=10, seed=5)
        images = [cv2.GaussianBlur(cv2.cvtColor(f.image, cv2.COLOR_RGB2GRAY).astype(np.float32), (0, 0), 1.0)
                  for f in frames]
        for later in (3, 9):
            ref, cur = images[0], images[later]
            grad_x = cv2.Sobel(cur, cv2.CV_32F, 1, 0, ksize=3, scale=1 / 8)
            grad_y = cv2.Sobel(cur, cv2.CV_32F, 0, 1, ksize=3, scale=1 / 8)
            fast = looming_kernels.register_scale(ref, cur, grad_x, grad_y, 19, 12, 0.0)
            slow = register_scale(ref, cur, 19, 12, 0.0)
            assert fast[0] == pytest.approx(slow[0], abs=1e-4)
            assert fast[1:3] == pytest.approx(slow[1:3], rel=0.02)
            assert fast[3] == pytest.approx(slow[3], abs=1e-3)


def test_compiled_smoothing_equals_opencv() -> None:
    """looming_kernels.smooth (the frames of the compiled TTC, into reused arrays) against cv2.GaussianBlur
    (sigma 1) and cv2.Sobel / 8 with OpenCV's default border, on uint8 and float32 frames of several sizes:
    within 2e-6 of the value range (the sums run in another order); the window texture it returns is the
    mean of gx² + gy² there."""
    import cv2
    from libredgetpu_ros.robotics import looming_kernels
    from libredgetpu_ros.robotics.ttc import _TAPS

    if not looming_kernels.warm_up():
        pytest.skip("numba is not installed: the NumPy path is the only one")
    rng = np.random.default_rng(4)
    for shape in ((64, 64), (128, 128), (48, 80), (9, 9)):
        for gray in (rng.integers(0, 256, shape, dtype=np.uint8), np.rint(textures.natural(5, 128))[
                :shape[0], :shape[1]].astype(np.float32)):
            out = [np.full(shape, np.nan, np.float32) for _ in range(3)]
            side = min(shape) // 2 | 1
            y0, x0 = (shape[0] - side) // 2, (shape[1] - side) // 3
            texture = looming_kernels.smooth(gray, _TAPS, *out, y0, x0, side)
            window = (slice(y0, y0 + side), slice(x0, x0 + side))
            assert texture == pytest.approx(np.mean(out[1][window] ** 2 + out[2][window] ** 2), rel=1e-5)
            blurred = cv2.GaussianBlur(gray.astype(np.float32), (0, 0), 1.0)
            expected = (blurred, cv2.Sobel(blurred, cv2.CV_32F, 1, 0, ksize=3, scale=1 / 8),
                        cv2.Sobel(blurred, cv2.CV_32F, 0, 1, ksize=3, scale=1 / 8))
            for got, want in zip(out, expected, strict=True):
                np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * 255)


def test_histogram_selection_is_exact() -> None:
    """looming_kernels._select (the MAD's medians) gives np.sort(v)[k] on normal, heavy-tailed, tied,
    constant and outlier-laden float32 data of odd and even sizes."""
    from libredgetpu_ros.robotics import looming_kernels

    if not looming_kernels.warm_up():
        pytest.skip("numba is not installed: the NumPy path is the only one")
    rng = np.random.default_rng(5)
    for n in (1, 2, 17, 100, 1521, 5929):
        spare, bins, counts = np.empty(n, np.float32), np.empty(n, np.uint8), np.empty(4 * 256, np.int32)
        for values in (rng.normal(size=n), rng.standard_cauchy(size=n), rng.integers(0, 4, n),
                       np.full(n, 3.5), np.where(rng.random(n) < 0.1, 1e30, rng.normal(size=n)),
                       np.float32(1) + (rng.random(n) < 0.5) * np.float32(1.2e-7)):
            data = np.asarray(values, np.float32)
            for k in {0, n // 2, n - 1}:
                assert looming_kernels._select(data.copy(), n, k, spare, bins, counts) == np.sort(data)[k]


@pytest.mark.parametrize("kernels", [True, False])
def test_a_bad_frame_is_refused_and_the_history_kept(kernels) -> None:
    """A frame with NaN / inf or of the wrong shape raises InputError (the compiled selection assumes finite
    values) and leaves the history as it was: the next good frame still gets its TTC."""
    from libredgetpu_ros.errors import InputError

    estimator = ScaleTtc(TtcSettings(), kernels=kernels)
    frames = presets.motion_scene("approach", _texture("natural"), noise=0.0, frames=40)
    import cv2

    grays = [cv2.resize(f.gray(), (64, 64), interpolation=cv2.INTER_AREA) for f in frames]
    for frame, gray in zip(frames[:-1], grays[:-1], strict=True):
        estimator.update(gray, frame.stamp_s)
    samples = estimator.samples
    bad = grays[-1].astype(np.float32)
    bad[30, 30] = np.nan
    for frame in (bad, np.where(bad == bad, bad, np.inf), grays[-1][None], np.zeros((64, 64), bool)):
        with pytest.raises(InputError):
            estimator.update(frame, frames[-1].stamp_s)
        assert estimator.samples == samples
    estimate = estimator.update(grays[-1], frames[-1].stamp_s)
    assert estimate.ttc_s == pytest.approx(frames[-1].truth.ttc_s, rel=0.05)


@pytest.mark.parametrize("kernels", [True, False])
def test_another_frame_size_restarts_the_history(kernels) -> None:
    """Frames of another size cannot be registered on the history's: the history restarts (``filling``)."""
    import cv2

    estimator = ScaleTtc(TtcSettings(), kernels=kernels)
    frames = presets.motion_scene("approach", _texture("natural"), noise=0.0, frames=20)
    for frame in frames[:-1]:
        estimator.update(cv2.resize(frame.gray(), (64, 64), interpolation=cv2.INTER_AREA), frame.stamp_s)
    assert estimator.samples > 1
    estimate = estimator.update(cv2.resize(frames[-1].gray(), (48, 40), interpolation=cv2.INTER_AREA),
                                frames[-1].stamp_s)
    assert estimate.reason == "filling" and estimator.samples == 1
