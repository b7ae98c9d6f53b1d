"""VisualCompass on a panorama panned by known angles (pinhole views of a cylindrical 360° strip), CPU twin.

Required: per frame pair, yaw error ≤ the angle of half a grid step (fov · 2 / 64 at 64 pixels, pool 4:
1.875° at 60°, 2.81° at 90°); heading drift over 100 frames is printed (and bounded loosely here: the
figure belongs in docs/robotics.md, not an assert on the exact value).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.robotics.compass import VisualCompass, fov_from_camera_info
from libredgetpu_ros.robotics.flow import OpticalFlow

from .._helpers import load_helper

scenes = load_helper(Path(__file__).with_name("_flow_scenes.py"))


@pytest.fixture(scope="module")
def flow(fixture_path):
    with OpticalFlow.from_template(fixture_path("robotics/optical_flow/gabor_64x64_p4_edgetpu.tflite"),
                          backend="cpu") as opened:
        yield opened


@pytest.mark.parametrize("projection", ["pinhole", "linear"])
@pytest.mark.parametrize("fov", [60.0, 90.0])
def test_yaw_per_pair_within_half_a_grid_step(flow, fov: float, projection: str) -> None:
    compass = VisualCompass(flow, fov, projection)
    strip = scenes.panorama_strip(fov)
    limit = 0.5 * compass.deg_per_grid_step
    two_steps = 2 * compass.deg_per_grid_step
    errors = []
    for start in (0.0, 95.0, 200.0, 290.0):
        for yaw in np.linspace(-two_steps, two_steps, 9):
            compass.reset()
            result = compass.compute(scenes.panorama_view(strip, start, fov),
                                     scenes.panorama_view(strip, start + yaw, fov))
            assert result.valid, f"start {start} yaw {yaw:.2f}: {result.flow.reason}"
            errors.append(abs(result.yaw_deg - yaw))
    print(f"fov {fov} {projection}: {len(errors)} pairs, yaw error mean {np.mean(errors):.3f} max "
          f"{np.max(errors):.3f} deg (limit {limit:.3f})")
    assert max(errors) <= limit


@pytest.mark.parametrize("projection", ["pinhole", "linear"])
@pytest.mark.parametrize("fov", [60.0, 90.0])
def test_heading_drift_over_100_frames(flow, fov: float, projection: str) -> None:
    compass = VisualCompass(flow, fov, projection)
    compass.reset()
    strip = scenes.panorama_strip(fov)
    rng = np.random.default_rng(11)
    steps = rng.uniform(-1.5, 1.5, 99) * compass.deg_per_grid_step  # within the grid, both directions
    truth = np.concatenate([[0.0], np.cumsum(steps)])
    results = [compass.step(scenes.panorama_view(strip, angle, fov), stamp=k / 30.0)
               for k, angle in enumerate(truth)]
    assert compass.pairs == 99 and compass.invalid == sum(not r.valid for r in results[1:])
    drift = compass.heading_deg - truth[-1]
    per_frame = max(abs(r.yaw_deg - s) for r, s in zip(results[1:], steps, strict=True) if r.valid)
    print(f"fov {fov} {projection}: 100 frames, true heading {truth[-1]:.2f} deg, integrated "
          f"{compass.heading_deg:.2f} deg, drift {drift:+.3f} deg ({abs(drift) / 99:.4f} deg/frame), "
          f"invalid pairs {compass.invalid}, worst pair {per_frame:.3f} deg")
    assert compass.invalid == 0
    assert abs(drift) < 0.5 * compass.deg_per_grid_step * 99  # never worse than every pair at its limit
    rates = [r.yaw_rate for r in results[1:]]
    assert rates == pytest.approx([math.radians(r.yaw_deg) * 30.0 for r in results[1:]])


def test_sign_is_rep103_left_turn_positive(flow) -> None:
    compass = VisualCompass(flow, 90.0)
    strip = scenes.panorama_strip(90.0)
    left = compass.compute(scenes.panorama_view(strip, 0.0, 90.0), scenes.panorama_view(strip, 5.0, 90.0))
    assert left.yaw_deg > 0 and left.flow.vx > 0  # turned left: the scene moved right in the image
    assert left.yaw_rad == pytest.approx(math.radians(left.yaw_deg))


def test_invalid_pairs_leave_the_heading_alone(flow) -> None:
    compass = VisualCompass(flow, 60.0)
    compass.reset(heading_deg=10.0)
    flat = np.full((64, 64), 90, np.uint8)
    compass.step(flat, 0.0)
    result = compass.step(flat, 0.1)
    assert not result.valid and result.yaw_deg == 0.0 and compass.heading_deg == 10.0


def test_fov_from_camera_info_and_bad_fov(flow) -> None:
    assert fov_from_camera_info(640, 320.0) == pytest.approx(90.0)
    with pytest.raises(ConfigError):
        fov_from_camera_info(640, 0.0)
    with pytest.raises(ConfigError):
        VisualCompass(flow, 0.0)
    with pytest.raises(ConfigError):
        VisualCompass(flow, 60.0, projection="fisheye")


def test_from_template_closes_the_flow_when_the_compass_refuses(fixture_path, monkeypatch) -> None:
    """The one flow-then-compass constructor (CLI ``robotics compass`` and the flow node): options reach the
    flow, and a refused field of view or projection closes the flow it opened (no device left open)."""
    template = fixture_path("robotics/optical_flow/gabor_64x64_p4_edgetpu.tflite")
    with VisualCompass.from_template(template, 75.0, "linear", backend="cpu", search_range=3) as compass:
        assert compass.fov_deg == 75.0 and compass.projection == "linear"
        assert compass.flow.search_range == 3 and compass.flow.runner.backend_name == "cpu"
    closed: list[OpticalFlow] = []
    real_close = OpticalFlow.close
    monkeypatch.setattr(OpticalFlow, "close", lambda self: (closed.append(self), real_close(self))[1])
    for fov, projection in ((0.0, "pinhole"), (60.0, "fisheye")):
        with pytest.raises(ConfigError):
            VisualCompass.from_template(template, fov, projection, backend="cpu")
    assert len(closed) == 2


@pytest.mark.parametrize("fov", [60.0, 90.0, 170.0])
def test_compiled_remap_equals_opencv(fov: float) -> None:
    """robotics/compass_kernels.py's remap (the pinhole projection's equal-angle columns, compiled) against
    cv2.remap with the same float maps (bilinear at the maps' coordinates, BORDER_REPLICATE): uint8 frames
    to uint8 equal but for a rounded exact half, uint8 and float32 frames to float32 within 1e-4 grey
    level, both outputs of one pass as each alone, at the model's size and a camera's."""
    import cv2
    from libredgetpu_ros.robotics import compass_kernels
    from libredgetpu_ros.robotics.compass import cylindrical_maps

    if not compass_kernels.warm_up():
        pytest.skip("numba is not installed: the compass uses cv2.remap")
    rng = np.random.default_rng(int(fov))
    for w, h in ((64, 64), (160, 120), (9, 13)):
        maps = cylindrical_maps(w, h, fov)
        plan = compass_kernels.plan(*maps, w, h)
        gray = rng.integers(0, 256, (h, w), dtype=np.uint8)
        none = np.empty((0, 0), np.uint8), np.empty((0, 0), np.float32)
        both = np.empty((h, w), np.uint8), np.empty((h, w), np.float32)
        compass_kernels.remap(gray, *plan, *both)
        for src, dtype in ((gray, np.uint8), (gray, np.float32), (gray.astype(np.float32), np.float32)):
            want = cv2.remap(src.astype(dtype), *maps, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            got = np.empty((h, w), dtype)
            compass_kernels.remap(src, *plan, *((got, none[1]) if dtype is np.uint8 else (none[0], got)))
            diff = np.abs(got.astype(np.float64) - want)
            if dtype is np.uint8:
                assert diff.max() <= 1 and np.count_nonzero(diff) <= 2, (w, h, np.count_nonzero(diff))
            else:
                assert diff.max() < 1e-4, (w, h, diff.max())
            if src is gray:
                np.testing.assert_array_equal(both[0 if dtype is np.uint8 else 1], got)
