"""``libredgetpu-ros robotics flow|compass``: JSON per image (the motion since the previous one), valid=false
on flat frames, one ``error:`` line and exit 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from libredgetpu_ros.cli.main import main

from .._helpers import load_helper

scenes = load_helper(Path(__file__).with_name("_flow_scenes.py"))


def _write(folder: Path, name: str, image: np.ndarray) -> str:
    path = folder / name
    cv2.imwrite(str(path), image)
    return str(path)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_flow_json_per_pair_in_input_pixels(tmp_path, capsys) -> None:
    scene = scenes.photo("grace_hopper.bmp", 400)
    shifts = [(0, 0), (8, -4), (16, -8), (20, -8)]  # 128x128 frames: 2 input px per model px, grid step 8 px
    frames = [_write(tmp_path, f"f{k}.png", scenes.shifted_pair(scene, dx, dy, n=128)[1])
              for k, (dx, dy) in enumerate(shifts)]
    flat = _write(tmp_path, "flat.png", np.full((128, 128), 100, np.uint8))
    code, out, _ = _run(capsys, "robotics", "flow", "--model", "gabor_64x64_p4", "--backend", "cpu", "--json",
                        "--fps", "10", *frames, flat)
    assert code == 0
    report = json.loads(out)
    assert (report["module"], report["template"], report["backend"]) == ("flow", "gabor_64x64_p4", "cpu")
    results = report["results"]
    assert [r["image"] for r in results] == [*frames, flat]
    assert results[0]["valid"] is False and results[0]["reason"] == "first_frame"
    step_px = 2 * report["grid_step_px"]  # grid step in these 128-pixel images
    for (x0, y0), (x1, y1), r in zip(shifts[:-1], shifts[1:], results[1:4], strict=True):
        assert r["valid"] is True
        assert abs(r["vx"] - (x1 - x0)) <= 0.5 * step_px and abs(r["vy"] - (y1 - y0)) <= 0.5 * step_px
        assert r["vx_per_s"] == pytest.approx(r["vx"] * 10)
        assert r["direction"] in ("right", "up-right")  # the photo moves right and up
    assert results[4]["valid"] is False and results[4]["reason"] == "low_texture" and results[4]["vx"] == 0.0


def test_compass_json_yaw_and_heading(tmp_path, capsys) -> None:
    strip = scenes.panorama_strip(60.0)
    angles = [0.0, 2.0, 5.0, 3.0]
    frames = [_write(tmp_path, f"p{k}.png", scenes.panorama_view(strip, angle, 60.0))
              for k, angle in enumerate(angles)]
    code, out, _ = _run(capsys, "robotics", "compass", "--model", "gabor_64x64_p4", "--backend", "cpu",
                        "--fov", "60", "--json", *frames)
    assert code == 0
    report = json.loads(out)
    assert report["module"] == "compass" and report["fov_deg"] == 60.0 and report["projection"] == "pinhole"
    limit = 0.5 * 60.0 * 4 / 64  # half a grid step
    for previous, angle, r in zip(angles[:-1], angles[1:], report["results"][1:], strict=True):
        assert r["valid"] and abs(r["yaw_deg"] - (angle - previous)) <= limit
    assert report["heading_deg"] == pytest.approx(report["results"][-1]["heading_deg"])
    assert abs(report["heading_deg"] - angles[-1]) <= 3 * limit


def test_text_output(tmp_path, capsys) -> None:
    frames = [_write(tmp_path, f"t{k}.png", scenes.shifted_pair(scenes.texture(1), 4 * k, 0)[1])
              for k in range(2)]
    code, out, _ = _run(capsys, "robotics", "flow", "--model", "gabor_64x64_7k_4o_2s", "--backend", "cpu",
                        *frames)
    assert code == 0
    assert "flow on gabor_64x64_7k_4o_2s (cpu)" in out and "reason=first_frame" in out and "valid=True" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["compass", "--fov", "0"], "fov_deg must be in"),
    (["compass", "--fov", "400", "--projection", "linear"], "fov_deg must be in"),
    (["flow", "--search-range", "0"], "search_range must be in"),
    (["flow", "--min-confidence", "3"], "min_confidence must be in"),
    (["flow", "--fps", "-1"], "--fps must be a positive rate"),
    (["flow", "--no-resize"], "resizing is off"),
])
def test_bad_input_is_one_error_line_exit_2(tmp_path, capsys, extra, message) -> None:
    frame = _write(tmp_path, "big.png", scenes.shifted_pair(scenes.texture(1), 0, 0, n=96)[0])
    module, *options = extra
    code, out, err = _run(capsys, "robotics", module, "--model", "gabor_64x64_p4", "--backend", "cpu",
                          *options, frame, frame)
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], err


def test_not_an_image_exits_2(tmp_path, capsys) -> None:
    bogus = tmp_path / "x.png"
    bogus.write_bytes(b"not a png")
    code, _, err = _run(capsys, "robotics", "flow", "--model", "gabor_64x64_p4", "--backend", "cpu",
                        str(bogus))
    assert code == 2 and err.startswith("error:") and "x.png" in err
