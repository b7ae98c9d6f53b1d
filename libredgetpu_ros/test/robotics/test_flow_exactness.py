"""OpticalFlow's ``libredgetpu`` mode against LibrEdgeTPU's formulas on the same feature maps.

Feature maps come from the CPU twin on fixture photos shifted by known amounts. Two references:

- the formulas written out here, one displacement at a time (block sum, zero point, overlap-normalised raw
  correlation, soft argmax), independent of ``robotics.correlation``'s matrix-product layout;
- LibrEdgeTPU's own ``OpticalFlow._compute_from_uint8`` when a checkout is found (``$LIBREDGETPU_SRC`` or
  /work/ext/LibrEdgeTPU); skipped otherwise.

Tolerances: our correlation is float64 and exact for these integer features: scores within 1e-6 relative
and ``vx``, ``vy`` within 1e-9 grid steps of the formulas. LibrEdgeTPU sums in float32 (relative error ~1e-7
of scores ~1e3..1e4, divided by the temperature inside the softmax): within 5e-3 grid steps of its own
class (largest measured difference 1.4e-3, 64×64 pooled at temperature 0.05; 0 to 1e-6 elsewhere).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.robotics.correlation import CorrelationGrid, block_sum, refined_peak
from libredgetpu_ros.robotics.flow import OpticalFlow

from .._helpers import load_helper

scenes = load_helper(Path(__file__).with_name("_flow_scenes.py"))

TEMPLATES = ["gabor_64x64_7k_4o_2s", "gabor_64x64_p4", "gabor_128x128_7k_4o_2s", "gabor_128x128_p4"]
SHIFTS = [(0, 0), (4, 0), (-3.5, 2), (6, 6), (-8, -4), (1.25, -7)]
VXY_TOL = 1e-9  # grid steps, against the formulas in float64
THEIR_TOL = 5e-3  # grid steps, against LibrEdgeTPU (float32 sums; 1.4e-3 measured at temperature 0.05)
SCORE_RTOL = 1e-6


def _maps(model: Path, flow: OpticalFlow) -> list[tuple[np.ndarray, np.ndarray]]:
    """Raw uint8 feature maps of shifted photo pairs (frames at the model's size)."""
    n = flow.height
    pairs = []
    for name in ("grace_hopper.bmp", "test_couple.jpg"):
        scene = scenes.photo(name, size=2 * n + 32)
        for dx, dy in SHIFTS:
            a, b = scenes.shifted_pair(scene, dx * n / 64, dy * n / 64, n=n)
            run = flow.runner.run
            fa = run([a.reshape(1, n, n, 1)])[0]["output"][0]
            fb = run([b.reshape(1, n, n, 1)])[0]["output"][0]
            pairs.append((fa, fb))
    return pairs


def reference(fa: np.ndarray, fb: np.ndarray, zero_point: int, fused: bool, pool: int, search_range: int,
              temperature: float) -> tuple[np.ndarray, float, float]:
    """LibrEdgeTPU's OpticalFlow formulas, one displacement at a time: scores [dy, dx] and (vx, vy)."""
    a = fa.astype(np.int64) - zero_point
    b = fb.astype(np.int64) - zero_point
    if not fused:
        h, w, c = a.shape
        hp, wp = h // pool, w // pool
        a = a[:hp * pool, :wp * pool].reshape(hp, pool, wp, pool, c).sum(axis=(1, 3))
        b = b[:hp * pool, :wp * pool].reshape(hp, pool, wp, pool, c).sum(axis=(1, 3))
    h, w, c = a.shape
    r = search_range
    scores = np.zeros((2 * r + 1, 2 * r + 1))
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            # b[y, x] against a[y - dy, x - dx] where both exist
            bs = b[max(0, dy):h + min(0, dy), max(0, dx):w + min(0, dx)]
            as_ = a[max(0, -dy):h + min(0, -dy), max(0, -dx):w + min(0, -dx)]
            overlap = (h - abs(dy)) * (w - abs(dx)) * c
            scores[dy + r, dx + r] = float(np.sum(as_ * bs)) / overlap
    weights = np.exp((scores - scores.max()) / temperature)
    weights /= weights.sum()
    offsets = np.arange(-r, r + 1)
    return scores, float(np.sum(weights * offsets[None, :])), float(np.sum(weights * offsets[:, None]))


def test_correlation_equals_direct_sums() -> None:
    rng = np.random.default_rng(7)
    for h, w, c, r in [(12, 10, 3, 3), (16, 16, 8, 4), (9, 14, 2, 1)]:
        a, b = rng.normal(size=(h, w, c)), rng.normal(size=(h, w, c))
        grid = CorrelationGrid(h, w, c, r)
        scores = grid.correlate(a, b)
        energy_a, energy_b = grid.overlap_energies(grid.energy_table((a * a).sum(-1)),
                                                   grid.energy_table((b * b).sum(-1)))
        for dy in range(-r, r + 1):
            for dx in range(-r, r + 1):
                bs = b[max(0, dy):h + min(0, dy), max(0, dx):w + min(0, dx)]
                as_ = a[max(0, -dy):h + min(0, -dy), max(0, -dx):w + min(0, -dx)]
                assert scores[dy + r, dx + r] == pytest.approx(np.sum(as_ * bs), rel=1e-12, abs=1e-9)
                assert energy_a[dy + r, dx + r] == pytest.approx(np.sum(as_ * as_), rel=1e-12)
                assert energy_b[dy + r, dx + r] == pytest.approx(np.sum(bs * bs), rel=1e-12)


def test_block_sum_equals_reshape_sum() -> None:
    rng = np.random.default_rng(8)
    for shape, factor in [((64, 64, 8), 4), ((66, 70, 3), 4), ((20, 20, 2), 5), ((32, 32, 1), 16)]:
        feat = rng.integers(0, 256, shape, dtype=np.uint8)
        h, w = shape[0] // factor, shape[1] // factor
        want = feat[:h * factor, :w * factor].astype(np.int64).reshape(h, factor, w, factor, -1).sum((1, 3))
        assert np.array_equal(block_sum(feat, factor), want)


def test_refined_peak_recovers_a_sampled_gaussian_and_parabola() -> None:
    offsets = np.arange(-4, 5, dtype=np.float64)
    gaussian = np.exp(-((offsets[None, :] - 1.3) ** 2) / 3.0 - ((offsets[:, None] + 0.4) ** 2) / 5.0)
    peak = refined_peak(gaussian)
    assert (peak.dx, peak.dy) == pytest.approx((1.3, -0.4), abs=1e-12)
    assert not peak.saturated and peak.margin > 0
    # scores that are not all positive: the parabola through them
    parabola = -((offsets[None, :] - 1.3) ** 2) - 2.0 * (offsets[:, None] + 0.4) ** 2
    peak = refined_peak(parabola)
    assert (peak.dx, peak.dy) == pytest.approx((1.3, -0.4), abs=1e-12)
    edge = refined_peak(-((offsets[None, :] - 6.0) ** 2) + 0.0 * offsets[:, None])
    assert edge.dx == 4.0 and edge.saturated


@pytest.mark.parametrize("name", TEMPLATES)
def test_libredgetpu_mode_equals_its_formulas(name: str, fixture_path) -> None:
    model = fixture_path(f"robotics/optical_flow/{name}_edgetpu.tflite")
    settings = [(4, 0.1), (2, 0.05), (6, 1.0), (3, 10.0)]
    with OpticalFlow.from_template(model, backend="cpu", mode="libredgetpu") as base:
        maps = _maps(model, base)
        theirs_available = scenes.libredgetpu_root() is not None
        worst = 0.0
        for search_range, temperature in settings:
            flow = OpticalFlow(base.runner, mode="libredgetpu", search_range=search_range,
                               temperature=temperature)
            theirs = scenes.libredgetpu_flow(model, search_range, temperature) if theirs_available else None
            zero = int(flow._out.zero_point)
            for fa, fb in maps:
                ours = flow.flow(flow.from_feature_map(fa), flow.from_feature_map(fb))
                scores, vx, vy = reference(fa, fb, zero, bool(flow.fused_pool), flow.pool_factor,
                                           search_range, temperature)
                got = flow.grid.correlate(flow.from_feature_map(fa).pooled, flow.from_feature_map(fb).pooled)
                np.testing.assert_allclose(got / flow.grid.overlap_counts, scores, rtol=SCORE_RTOL)
                assert (ours.vx_grid, ours.vy_grid) == pytest.approx((vx, vy), abs=VXY_TOL)
                assert ours.vx == pytest.approx(ours.vx_grid * flow.grid_step)
                if theirs is not None:
                    tx, ty = theirs._compute_from_uint8(fa, fb)
                    worst = max(worst, abs(tx - ours.vx_grid), abs(ty - ours.vy_grid))
                    assert (ours.vx_grid, ours.vy_grid) == pytest.approx((tx, ty), abs=THEIR_TOL)
        theirs_text = f"max |diff| {worst:.2e} grid steps" if theirs_available else "not found (skipped)"
        print(f"{name}: {len(maps) * len(settings)} pairs; LibrEdgeTPU itself {theirs_text}")


def test_libredgetpu_itself_is_compared_when_present(fixture_path) -> None:
    """Says plainly when LibrEdgeTPU's own class was not there to compare with."""
    if scenes.libredgetpu_root() is None:
        pytest.skip(f"no LibrEdgeTPU checkout (set ${scenes.LIBREDGETPU_ENV}); compared with the formulas "
                    f"only")
    model = fixture_path("robotics/optical_flow/gabor_64x64_p4_edgetpu.tflite")
    theirs = scenes.libredgetpu_flow(model)
    assert theirs.fused_pool == 4 and theirs.search_range == 4


@pytest.mark.parametrize("name", ["gabor_64x64_7k_4o_2s", "gabor_64x64_p4", "gabor_128x128_p4"])
def test_compiled_kernels_equal_the_numpy_path(name: str, fixture_path) -> None:
    """robotics.flow_kernels (numba) against robotics.correlation (NumPy): the same numbers, both modes."""
    from libredgetpu_ros.robotics import flow_kernels

    if not flow_kernels.available():
        pytest.skip("numba is not installed: the NumPy path is the only one")
    model = fixture_path(f"robotics/optical_flow/{name}_edgetpu.tflite")
    worst = 0.0
    with OpticalFlow.from_template(model, backend="cpu") as base:
        maps = _maps(model, base)
        for mode in ("libredgetpu", "normalized"):
            for search_range, temperature in [(4, 0.1), (2, 1.0), (5, 0.05)]:
                fast, slow = (OpticalFlow(base.runner, mode=mode, search_range=search_range,
                                          temperature=temperature, kernels=k) for k in (True, False))
                assert fast.kernels and not slow.kernels
                for fa, fb in maps:
                    a_fast, b_fast = fast.from_feature_map(fa), fast.from_feature_map(fb)
                    a_slow, b_slow = slow.from_feature_map(fa), slow.from_feature_map(fb)
                    np.testing.assert_allclose(a_fast.pooled, a_slow.pooled, rtol=1e-12, atol=1e-9)
                    if mode == "normalized":
                        np.testing.assert_allclose(a_fast.energy_table, a_slow.energy_table, rtol=1e-12)
                    got, want = fast.flow(a_fast, b_fast), slow.flow(a_slow, b_slow)
                    assert (got.valid, got.reason, got.saturated) == (want.valid, want.reason, want.saturated)
                    # the normalised scores are correlated in float32 lanes (flow_kernels.normalized_peak)
                    tol = 1e-9 if mode == "libredgetpu" else 1e-6
                    assert (got.vx_grid, got.vy_grid, got.confidence) == pytest.approx(
                        (want.vx_grid, want.vy_grid, want.confidence), rel=tol, abs=tol)
                    if mode == "normalized":
                        worst = max(worst, abs(got.vx_grid - want.vx_grid), abs(got.vy_grid - want.vy_grid),
                                    abs(got.confidence - want.confidence))
    print(f"{name}: normalised mode, compiled against NumPy: max |diff| {worst:.1e}")


def test_compiled_refinement_equals_the_opencv_one(monkeypatch) -> None:
    """flow_refine with flow_refine_kernels.refine_seed (exact bilinear stencil, float32 row sums) against
    its OpenCV/NumPy path (cv2.warpAffine, which rounds the sub-pixel shift to 1/32 pixel): the same
    displacement within 0.02 px and the same match score within 2e-3, at the model's size and at camera
    size, for shifts inside and beyond a grid step, and the same aperture verdict on stripes."""
    from libredgetpu_ros.robotics import flow_kernels, flow_refine

    if not flow_kernels.warm_up():
        pytest.skip("numba is not installed: the OpenCV path is the only one")
    scene = scenes.texture(4, 400)
    stripes = np.tile(np.uint8(128 + 100 * np.sin(np.arange(320) / 3.0))[None, :], (240, 1))
    cases = [(scenes.shifted_pair(scene, dx, dy, n=n), dx, dy) for n in (64, 240)
             for dx, dy in ((0.3, -0.2), (2.6, 1.4), (-5.0, 3.5))]
    cases.append(((stripes, np.roll(stripes, 2, axis=1)), 2.0, 0.0))
    results = {}
    for compiled in (True, False):
        monkeypatch.setattr(flow_kernels, "ready", lambda c=compiled: c)
        results[compiled] = []
        for (a, b), dx, dy in cases:
            fa, fb = flow_refine.fine_frame(a), flow_refine.fine_frame(b)
            results[compiled].append(flow_refine.refine(fa, fb, round(dx), round(dy)))
    for fast, slow, ((_, _), dx, dy) in zip(results[True], results[False], cases, strict=True):
        assert fast is not None and slow is not None
        assert fast.aperture == slow.aperture
        if not fast.aperture:
            assert (fast.dx, fast.dy) == pytest.approx((slow.dx, slow.dy), abs=0.02)
            assert fast.ncc == pytest.approx(slow.ncc, abs=2e-3)
            assert (fast.dx, fast.dy) == pytest.approx((dx, dy), abs=0.1)  # and both read the truth
    assert results[True][-1].aperture


@pytest.mark.parametrize("shape", [(64, 64), (120, 160), (8, 8), (9, 13)])
def test_compiled_fine_level_equals_opencv(shape) -> None:
    """flow_refine_kernels.fine_level (blur and Sobel of a refinement level) gives OpenCV's GaussianBlur and
    Sobel (its default border) to float32 rounding, down to the smallest level size (8 pixels)."""
    import cv2
    from libredgetpu_ros.robotics import flow_kernels, flow_refine

    if not flow_kernels.warm_up():
        pytest.skip("numba is not installed: OpenCV makes the levels")
    gray = np.random.default_rng(shape[1]).integers(0, 256, shape).astype(np.float32)
    level = flow_refine._level(gray)
    blurred = cv2.GaussianBlur(gray, (0, 0), flow_refine.SMOOTH_SIGMA)
    np.testing.assert_allclose(level[0], blurred, atol=1e-4)
    for got, dx, dy in ((level[1], 1, 0), (level[2], 0, 1)):
        expected = cv2.Sobel(blurred, cv2.CV_32F, dx, dy, ksize=3, scale=0.125)
        np.testing.assert_allclose(got, expected, atol=1e-4)


def test_compiled_frame_path_equals_the_numpy_one(fixture_path) -> None:
    """A frame through the compiled path (flow_kernels.stretch: statistics and contrast stretch in one pass)
    and through OpenCV/NumPy (meanStdDev, the stretch's lookup table): the same model input, so the same
    features and texture; flat frames refused alike."""
    from libredgetpu_ros.robotics import flow_kernels

    if not flow_kernels.warm_up():
        pytest.skip("numba is not installed: the NumPy path is the only one")
    model = fixture_path("robotics/optical_flow/gabor_64x64_p4_edgetpu.tflite")
    with OpticalFlow.from_template(model, backend="cpu", refine=False) as fast:
        slow = OpticalFlow(fast.runner, kernels=False, refine=False)
        rng = np.random.default_rng(7)
        frames = [scenes.shifted_pair(scenes.photo(name), 0, 0)[0]
                  for name in ("grace_hopper.bmp", "test_couple.jpg")]
        frames += [rng.integers(0, 256, (240, 320, 3), dtype=np.uint8), np.full((64, 64), 90, np.uint8),
                   (scenes.texture(3, 64) // 40 + 100).astype(np.uint8)]
        for frame in frames:
            a, b = fast.features(frame), slow.features(frame)
            assert a.texture == pytest.approx(b.texture, rel=1e-12)
            assert (a.pooled is None) == (b.pooled is None)
            if a.pooled is not None:
                np.testing.assert_allclose(a.pooled, b.pooled, rtol=1e-12, atol=1e-9)


def test_compiled_luma_equals_opencv_on_every_colour() -> None:
    """image_kernels.luma (the flow's and a one-channel template's RGB frames to grey in one compiled pass)
    gives cv2.cvtColor's COLOR_RGB2GRAY bit for bit on all 2**24 colours, so the flow and fit_image see the
    same frame either way."""
    import cv2
    from libredgetpu_ros.robotics import flow_kernels, image_kernels

    if not flow_kernels.warm_up():
        pytest.skip("numba is not installed: OpenCV makes the grey frame")
    assert image_kernels.ready()  # the flow's warm-up warms it
    levels = np.arange(256, dtype=np.uint8)
    every = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(4096, 4096, 3)
    gray = np.empty((4096, 4096), np.uint8)
    image_kernels.luma(every, gray)
    np.testing.assert_array_equal(gray, cv2.cvtColor(every, cv2.COLOR_RGB2GRAY))
