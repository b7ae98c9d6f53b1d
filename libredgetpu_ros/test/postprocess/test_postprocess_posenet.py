"""PoseNet decoder vs Google's reference poses (PosenetDecoderOp on test_couple.jpg)."""

from __future__ import annotations

import csv

import cv2
import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError, InputError, ModelFormatError
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.postprocess.posenet import KEYPOINT_NAMES, PoseDecoder

from .litert_util import cut_interpreter, run

MODEL = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder.tflite"
REFERENCE = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_reference.csv"
# Tolerances: the reference CSV came from an older TFLite build running the same model, so the boundary
# tensors differ by a few quantization steps; positions and scores move by that much, not more.
POSE_SCORE_TOL = 0.01
KEYPOINT_SCORE_TOL = 0.02
POSITION_TOL_PX = 2.0


@pytest.fixture(scope="module")
def decoder_and_outputs(fixture_path):
    model = load_model(fixture_path(MODEL))
    decoder = PoseDecoder.from_model(model)
    interpreter = cut_interpreter(fixture_path(MODEL), decoder.input_names)
    rgb = cv2.cvtColor(cv2.imread(str(fixture_path("images/test_couple.jpg"))), cv2.COLOR_BGR2RGB)
    h, w = interpreter.get_input_details()[0]["shape"][1:3]
    # Google's test resizes with PIL's NEAREST, i.e. pixel-centre sampling = OpenCV's INTER_NEAREST_EXACT.
    rgb = cv2.resize(rgb, (int(w), int(h)), interpolation=cv2.INTER_NEAREST_EXACT)
    return decoder, run(interpreter, rgb)


def _reference(path):
    poses: dict[int, dict] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            pose = poses.setdefault(int(row["pose_id"]), {"score": float(row["pose_score"]), "kp": {}})
            pose["kp"][row["keypoint_label"].lower()] = (float(row["keypoint_x"]), float(row["keypoint_y"]),
                                                          float(row["keypoint_score"]))
    return [poses[k] for k in sorted(poses)]


def test_options_read_from_model(decoder_and_outputs):
    decoder, _ = decoder_and_outputs
    o = decoder.options
    assert (o.max_detections, o.stride, o.nms_radius) == (10, 16, 10.0)
    assert o.score_threshold == pytest.approx(0.2)


def test_matches_google_reference_csv(decoder_and_outputs, fixture_path):
    decoder, outputs = decoder_and_outputs
    poses = decoder.decode(outputs)
    reference = _reference(fixture_path(REFERENCE))
    assert len(poses) == len(reference)
    for pose, ref in zip(poses, reference, strict=True):
        assert pose.score == pytest.approx(ref["score"], abs=POSE_SCORE_TOL)
        assert [k.name for k in pose.keypoints] == list(KEYPOINT_NAMES)
        for kp in pose.keypoints:
            x, y, score = ref["kp"][kp.name]
            assert kp.score == pytest.approx(score, abs=KEYPOINT_SCORE_TOL), kp.name
            assert np.hypot(kp.x - x, kp.y - y) <= POSITION_TOL_PX, (kp.name, kp.x, kp.y, x, y)
    assert pose.xy().shape == (17, 2)


def test_overrides_change_results(decoder_and_outputs, fixture_path):
    decoder, outputs = decoder_and_outputs
    model = load_model(fixture_path(MODEL))
    assert len(PoseDecoder.from_model(model, max_detections=1).decode(outputs)) == 1
    assert PoseDecoder.from_model(model, score_threshold=0.95).decode(outputs) == []
    with pytest.raises(ConfigError):
        PoseDecoder.from_model(model, score_threshold=1.5)
    before = decoder.options
    with pytest.raises(ConfigError):
        decoder.set_options(stride=0)
    assert decoder.options == before


def test_bad_outputs_raise_input_error(decoder_and_outputs):
    decoder, outputs = decoder_and_outputs
    missing = dict(outputs)
    del missing[decoder.input_names[1]]
    with pytest.raises(InputError, match="lack tensor"):
        decoder.decode(missing)
    wrong = dict(outputs)
    wrong[decoder.input_names[0]] = outputs[decoder.input_names[0]][:, :-1]
    with pytest.raises(InputError, match="shape"):
        decoder.decode(wrong)


def test_model_without_decoder_op(fixture_path):
    with pytest.raises(ModelFormatError, match="PosenetDecoderOp"):
        PoseDecoder.from_model(load_model(fixture_path("classify/mobilenet_v1_0.25_128_quant.tflite")))


def test_edgetpu_model_has_same_boundary(fixture_path):
    cpu = PoseDecoder.from_model(load_model(fixture_path(MODEL)))
    tpu = PoseDecoder.from_model(load_model(fixture_path(MODEL.replace(".tflite", "_edgetpu.tflite"))))
    assert tpu.input_names == cpu.input_names
    assert tpu.options == cpu.options
