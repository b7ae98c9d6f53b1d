"""``libredgetpu-ros robotics`` and ``retarget``: JSON per image, one-line errors with exit 2, retargeted
files byte-exact against the compiled colour variants (every ordered pair of the 7 and the 128x128 red)."""

from __future__ import annotations

import itertools
import json

import cv2
import numpy as np
import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.robotics.spot import COLOR_PRESETS, SpotTracker
from libredgetpu_ros.robotics.template import load_template

from .._helpers import one_error_line


def _write(path, rgb) -> str:
    cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR) if rgb.ndim == 3 else rgb)
    return str(path)


def _spot(path, x: int, y: int, rgb=(255, 0, 0)) -> str:
    image = np.zeros((64, 64, 3), np.uint8)
    cv2.circle(image, (x, y), 4, rgb, -1)
    return _write(path, image)


def _run_json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_spot_json_per_image_and_colour_swap(tmp_path, capsys) -> None:
    left, right = _spot(tmp_path / "l.png", 12, 31), _spot(tmp_path / "r.png", 52, 31, (0, 255, 0))
    report = _run_json(capsys, ["robotics", "spot", "--model", "color_red_64x64", "--backend", "cpu",
                                "--json", left, right])
    assert report["module"] == "spot" and report["backend"] == "cpu" and len(report["results"]) == 2
    assert report["results"][0]["x_offset"] < -0.4 and report["results"][0]["image"] == left
    report = _run_json(capsys, ["robotics", "spot", "--model", "color_red_64x64", "--backend", "cpu",
                                "--color", "-0.5", "1", "-0.5", "--json", right])
    assert report["results"][0]["x_offset"] > 0.4 and report["version"] == 1
    assert report["color"]["weights"] == [-64, 127, -64]


def test_pattern_and_looming_json(tmp_path, capsys, fixture_path) -> None:
    rgb = cv2.cvtColor(cv2.imread(str(fixture_path("images/grace_hopper.bmp"))), cv2.COLOR_BGR2RGB)
    gray = cv2.cvtColor(cv2.resize(rgb, (64, 64), interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2GRAY)
    _, x, y = max((gray[y:y + 8, x:x + 8].std(), x, y) for y in range(8, 48, 2) for x in range(8, 48, 2))
    patch = _write(tmp_path / "patch.png", gray[y:y + 8, x:x + 8])
    image = _write(tmp_path / "photo.png", gray)
    report = _run_json(capsys, ["robotics", "pattern", "--model", "pattern_64x64_8x8_1ch", "--backend", "cpu",
                                "--template", patch, "--json", image])
    found = report["results"][0]
    assert abs(found["x"] - (x + 3.5)) <= 2 and abs(found["y"] - (y + 3.5)) <= 2
    frames = [_write(tmp_path / f"f{i}.png", np.full((64, 64), 100 + 20 * (i % 2), np.uint8))
              for i in range(3)]
    report = _run_json(capsys, ["robotics", "looming", "--model", "looming_64x64_3x3", "--backend", "cpu",
                                "--fps", "10", "--json", *frames])
    assert [len(r["zones"]) for r in report["results"]] == [3, 3, 3]
    assert all("tau" in r and "ttc_s" in r for r in report["results"])
    assert main(["robotics", "looming", "--model", "looming_64x64_3x3", "--backend", "cpu", frames[0]]) == 0
    assert "tau=" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["robotics", "spot", "--model", "no_such_template", "IMG"], "is unknown"),  # + close names
    (["robotics", "spot", "--model", "color_red_64x64", "--backend", "cpu", "missing.png"], "missing.png"),
    (["robotics", "spot", "--model", "bright_64x64", "--backend", "cpu", "--color", "1", "0", "0", "IMG"],
     "brightness"),
    (["robotics", "spot", "--model", "color_red_64x64", "--backend", "cpu", "--color", "nan", "0", "0",
      "IMG"], "nan"),
    (["robotics", "pattern", "--model", "pattern_64x64_8x8_1ch", "--backend", "cpu", "--template", "IMG",
      "IMG"], "shape"),
    (["robotics", "pattern", "--model", "pattern_64x64_8x8_1ch", "--backend", "edgetpu", "--template", "IMG",
      "IMG"], "no compiled model"),
    (["robotics", "looming", "--model", "looming_64x64_3x3", "--backend", "cpu", "--no-resize", "IMG"],
     "resizing is off"),
    (["robotics", "looming", "--model", "looming_64x64_3x3", "--fps", "-1", "IMG"], "--fps"),
    (["robotics", "spot", "--model", "color_red_64x64", "--backend", "cpu"], "no IMAGE"),
    (["robotics", "spot", "--model", "color_red_64x64", "--bag", "/no/such/bag", "IMG"], "not both"),
    (["robotics", "looming", "--model", "looming_64x64_3x3", "--bag", "/no/such/bag"], "/no/such/bag"),
    (["retarget", "color_red_64x64", "--color", "1", "0", "0", "-o", "/no/such/dir/x_edgetpu.tflite"],
     "/no/such/dir"),
    (["retarget", "pattern_64x64_8x8_1ch", "--template", "IMG", "-o", "OUT"], "shape"),
    (["retarget", "color_red_64x64", "--template", "IMG", "-o", "OUT"], "not a pattern template"),
    (["retarget", "bright_64x64", "--color", "1", "0", "0", "-o", "OUT"], "brightness"),
])
def test_bad_input_is_one_error_line_exit_2(tmp_path, capsys, argv, message) -> None:
    image = _write(tmp_path / "img.png", np.zeros((48, 40, 3), np.uint8))
    argv = [image if a == "IMG" else str(tmp_path / "out_edgetpu.tflite") if a == "OUT" else a for a in argv]
    one_error_line(main(argv), capsys.readouterr().err, message)
    assert not (tmp_path / "out_edgetpu.tflite").exists()


@pytest.mark.parametrize(("loaded", "target"), list(itertools.permutations(COLOR_PRESETS, 2)))
def test_retarget_colour_pairs_byte_exact(tmp_path, capsys, loaded, target) -> None:
    """The written model's PARAMETER_CACHING blob == the target template's where the filter scales agree,
    else the nearest values on the loaded scale; and the written template loads and tracks the new colour."""
    src = load_template(f"color_{loaded}_64x64")
    dst = load_template(f"color_{target}_64x64")
    out = tmp_path / f"retargeted_{target}_edgetpu.tflite"
    report = _run_json(capsys, ["retarget", str(src.compiled_path), "--color",
                                *map(str, COLOR_PRESETS[target]), "-o", str(out), "--json"])
    assert len(report["written"]) == 3
    written = load_model(out)
    package = written.darwinn(written.edgetpu_ops()[0])
    pc = np.frombuffer(package.parameter_caching.parameters, np.uint8)
    scale = src.weight_scale(src.conv_weights())
    expected = np.clip(np.rint(np.array(COLOR_PRESETS[target]) / scale), -128, 127).astype(np.int8)
    assert (pc[:3] ^ 0x80).view(np.int8).tolist() == expected.tolist()
    if scale == dst.weight_scale(dst.conv_weights()):
        np.testing.assert_array_equal(pc, dst.blobs()["pc"])
    np.testing.assert_array_equal(pc[3:], src.blobs()["pc"][3:])
    assert out.read_bytes()[:1000] == src.compiled_path.read_bytes()[:1000]  # header untouched
    again = SpotTracker(load_template(out), backend="none")  # loads: its filter bytes agree with its twin
    assert again.color == pytest.approx(tuple(v * scale for v in expected.tolist()))


def test_retarget_128_red_and_the_result_runs(tmp_path, capsys) -> None:
    src = load_template("color_red_128x128")
    out = tmp_path / "blue128_edgetpu.tflite"
    _run_json(capsys, ["retarget", "color_red_128x128", "--color", "-0.5", "-0.5", "1", "-o", str(out),
                       "--json"])
    written = load_model(out)
    package = written.darwinn(written.edgetpu_ops()[0])
    pc = np.frombuffer(package.parameter_caching.parameters, np.uint8)
    assert (pc[:3] ^ 0x80).view(np.int8).tolist() == [-64, -64, 127]
    eo = np.frombuffer(package.execution_only.parameters, np.uint8)
    np.testing.assert_array_equal(eo, src.blobs()["eo"])
    with SpotTracker(load_template(out), backend="cpu") as tracker:
        image = np.zeros((128, 128, 3), np.uint8)
        cv2.circle(image, (100, 30), 4, (0, 0, 255), -1)
        cv2.circle(image, (20, 100), 4, (255, 0, 0), -1)
        result = tracker.track(image)
        assert result.valid and result.x_offset > 0.4 and result.y_offset < -0.4
        # a blue disc of radius 8 saturates ~200 cells: the int8 softmax keeps 79 % of the mass and the
        # decoded offset is pulled up by ~0.2; the check refuses it instead of reporting it
        cv2.circle(image, (100, 30), 8, (0, 0, 255), -1)
        result = tracker.track(image)
        assert not result.valid and result.reason == "spread" and result.mass < 0.9


@pytest.mark.timeout(60)  # before: blocked forever opening the FIFO
@pytest.mark.parametrize("where", ["x.mcap in the bag folder", "metadata.yaml in the bag folder", "the bag"])
def test_a_fifo_bag_is_one_error_line_not_a_hang(tmp_path, capsys, where) -> None:
    """Issue 30 item 1: ``robotics spot --bag`` on a bag folder holding a FIFO ``x.mcap`` hung (as the
    reservoir node's ``~/fit`` did): every entry of a bag is checked as a regular file before opening."""
    import os

    bag = tmp_path / "bag"
    if where == "the bag":
        os.mkfifo(bag)
    else:
        bag.mkdir()
        os.mkfifo(bag / where.split()[0])
    argv = ["robotics", "spot", "--model", "color_red_64x64", "--backend", "cpu", "--bag", str(bag)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a FIFO, not a regular file" in err[0], err


def test_silent_substitutions_are_said_in_text_mode(tmp_path, capsys) -> None:
    """Issue 31 item 5: clipped colour weights print a warning on stderr in text mode (robotics spot and
    retarget), and a --model naming a compiled file that does not exist is an error, not the twin."""
    from libredgetpu_ros.fixtures import fixture

    image = tmp_path / "frame.png"
    cv2.imwrite(str(image), np.zeros((64, 64, 3), np.uint8))
    argv = ["robotics", "spot", "--model", "color_white_64x64", "--backend", "cpu", "--color", "1", "0.5",
            "-1", str(image)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "warning:" in captured.err and "clipped" in captured.err and "reason=no_target" in captured.out
    assert main(["retarget", "color_white_64x64", "--color", "1", "0.5", "-1", "-o",
                 str(tmp_path / "w_edgetpu.tflite")]) == 0
    assert "clipped" in capsys.readouterr().err
    missing = str(fixture("robotics/pattern/pattern_64x64_8x8_1ch.tflite")).replace(".tflite",
                                                                                       "_edgetpu.tflite")
    patch = tmp_path / "patch.png"
    cv2.imwrite(str(patch), (np.arange(64).reshape(8, 8) * 4).astype(np.uint8))
    assert main(["robotics", "pattern", "--model", missing, "--template", str(patch), str(image)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "_edgetpu.tflite" in err
