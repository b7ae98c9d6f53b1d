"""``libredgetpu-ros infer``: JSON schema, annotated output, exit code 2 on bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from libredgetpu_ros.cli.main import main

POSENET = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"


def _infer(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["infer", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_pose_json_schema_and_annotation(capsys, fixture_path, tmp_path):
    import cv2

    annotated = tmp_path / "pose.png"
    image = fixture_path("images/test_couple.jpg")
    code, out, _ = _infer(capsys, "--model", str(fixture_path(POSENET)), "--image", str(image),
                          "--backend", "cpu", "--json", "--annotate", str(annotated))
    assert code == 0
    report = json.loads(out)
    assert report["task"] == "pose" and report["backend"] == "cpu"
    assert report["image_size"] == {"width": 1920, "height": 1278}
    assert set(report["timings_ms"]) == {"preprocess", "inference", "postprocess", "total"}
    assert len(report["poses"]) == 2
    nose = report["poses"][0]["keypoints"]["nose"]
    assert set(nose) == {"x", "y", "score"} and 0 <= nose["x"] < 1920 and 0 <= nose["y"] < 1278
    written = cv2.imread(str(annotated))
    assert written.shape == (1278, 1920, 3)
    assert not np.array_equal(written, cv2.imread(str(image)))


def test_text_output(capsys, fixture_path):
    code, out, _ = _infer(capsys, "--model", str(fixture_path(POSENET)), "--image",
                          str(fixture_path("images/test_couple.jpg")), "--backend", "cpu",
                          "--threshold", "0.8")
    assert code == 0
    assert out.startswith("pose on cpu") and "pose 0: score 0.89" in out and "pose 1" not in out


@pytest.mark.parametrize(("change", "message"), [
    ({"--image": "/etc/hostname"}, "cannot be decoded"),
    ({"--image": "missing.jpg"}, "does not exist"),
    ({"--model": "missing_edgetpu.tflite"}, "does not exist"),
    ({"--task": "classify"}, "this is a 'pose' model"),
    ({"--cpu-model": "classify/mobilenet_v1_0.25_128_quant.tflite"}, "no tensor named"),
    ({"--mask-out": "mask.png"}, "needs a segmentation model"),
])
def test_bad_input_exits_2(capsys, fixture_path, tmp_path, change, message):
    args = {"--model": str(fixture_path(POSENET)), "--image": str(fixture_path("images/cat.bmp")),
            "--backend": "cpu"}
    for key, value in change.items():
        if key == "--cpu-model":
            value = str(fixture_path(value))
        elif value.endswith((".jpg", ".png", ".tflite")):
            value = str(tmp_path / value)
        args[key] = value
    code, _, err = _infer(capsys, *[x for kv in args.items() for x in kv])
    assert code == 2, err
    assert message in err
