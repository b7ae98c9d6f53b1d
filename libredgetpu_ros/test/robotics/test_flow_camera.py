"""Flow at the camera's resolution (320×240 frames, the node's normal input) against known motion: photos of
the scene kit moved 2-12 px per frame along x, y and both diagonals read true (refinement at the frame's
resolution, robotics/flow_refine.py), motion beyond the search range (sharp and with its motion blur) never
comes back valid, and repeating scenes (a brick wall, a checkerboard) never give a confident wrong motion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.robotics.flow import OpticalFlow

from .._helpers import load_helper

scenes = load_helper(Path(__file__).with_name("_flow_scenes.py"))

DIRECTIONS = {"x": (1.0, 0.0), "y": (0.0, 1.0), "diagonal": (0.7071, 0.7071),
              "anti-diagonal": (-0.7071, 0.7071)}
TEMPLATES = ("gabor_64x64_p4", "gabor_128x128_p4")


@pytest.fixture(scope="module")
def flows(fixture_path):
    opened = {name: OpticalFlow.from_template(fixture_path(f"robotics/optical_flow/{name}_edgetpu.tflite"),
                                              backend="cpu") for name in TEMPLATES}
    yield opened
    for flow in opened.values():
        flow.close()


def _pairs(flow: OpticalFlow, frames: list[np.ndarray]) -> list:
    flow.reset()
    results = [flow.step(frame) for frame in frames]
    return results[1:]


@pytest.mark.parametrize("template", TEMPLATES)
def test_slow_motion_at_camera_size_reads_true(flows, template) -> None:
    """Median read/truth (the estimate projected on the true direction / the true motion) in [0.9, 1.1] for
    every magnitude, over two photos (coffee: tuning set; gravel, the fine texture that read 0.25-0.42:
    held out) and four directions; every pair valid."""
    flow = flows[template]
    for magnitude in (2.0, 4.0, 8.0, 12.0):
        ratios = []
        for photo in ("coffee", "gravel"):
            for ux, uy in DIRECTIONS.values():
                for result in _pairs(flow, scenes.camera_sequence(photo, magnitude * ux, magnitude * uy)):
                    assert result.valid and not result.saturated, (photo, magnitude, ux, uy, result)
                    ratios.append((result.vx * ux + result.vy * uy) / magnitude)
        median = float(np.median(ratios))
        print(f"{template} {magnitude:4.1f} px/frame: median read/truth {median:.3f} (min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}, {len(ratios)} pairs)")
        assert 0.9 <= median <= 1.1


def test_motion_beyond_the_search_range_is_not_valid(flows) -> None:
    """100 and 150 px per frame (the 64×64 template's range is 4 steps = 80 × 60 px at 320×240), sharp and
    with the motion's blur, on two photos in five directions: valid on no more than 5 % of pairs."""
    flow = flows["gabor_64x64_p4"]
    total = valid = 0
    for photo in ("grass", "camera"):
        for magnitude in (100.0, 150.0):
            for blur in (False, True):
                for ux, uy in (*DIRECTIONS.values(), (-1.0, 0.0)):
                    for result in _pairs(flow, scenes.camera_sequence(photo, magnitude * ux, magnitude * uy,
                                                                      blur=blur)):
                        total += 1
                        valid += result.valid
    print(f"beyond the search range: {valid} of {total} pairs valid")
    assert valid <= 0.05 * total


def test_repeating_scenes_give_no_confident_wrong_motion(flows) -> None:
    """A brick-wall photo and a checkerboard (its squares 40 × 30 px: shifted by one square it is itself)
    moved 2-12 px per frame in four directions: valid pairs whose error exceeds one grid step are at most
    2 % of all pairs."""
    from libredgetpu_ros.scenes import textures

    flow = flows["gabor_64x64_p4"]
    total = wrong = valid = 0
    for scene in ("brick", textures.checkerboard(16, 512)):
        for magnitude in (2.0, 4.0, 8.0, 12.0):
            for ux, uy in DIRECTIONS.values():
                for result in _pairs(flow, scenes.camera_sequence(scene, magnitude * ux, magnitude * uy)):
                    total += 1
                    if result.valid:
                        valid += 1
                        # one grid step: 4 model px = 20 camera px along x (320 / 64 * 4), 15 along y
                        error = max(abs(result.vx_grid - magnitude * ux / 20.0),
                                    abs(result.vy_grid - magnitude * uy / 15.0))
                        wrong += error > 1.0
    print(f"repeating scenes: {valid} of {total} pairs valid, {wrong} of them off by more than a grid step")
    assert wrong <= 0.02 * total
