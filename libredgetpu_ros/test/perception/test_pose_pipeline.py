"""PoseNet end to end on the CPU backend against the poses Google's decoder produced (reference CSV)."""

from __future__ import annotations

import csv
import threading

import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError, ImageError
from libredgetpu_ros.perception.images import load_image
from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

MODEL = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite"
REFERENCE = "posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_reference.csv"
INPUT_W, INPUT_H = 641, 481


@pytest.fixture(scope="module")
def pipeline(fixture_path):
    with PerceptionPipeline.from_config(PipelineConfig(model=fixture_path(MODEL), backend="cpu")) as p:
        yield p


@pytest.fixture(scope="module")
def couple(fixture_path):
    return load_image(fixture_path("images/test_couple.jpg"))


def _reference(path) -> dict[int, list[dict[str, str]]]:
    poses: dict[int, list[dict[str, str]]] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            poses.setdefault(int(row["pose_id"]), []).append(row)
    return poses


def test_matches_google_reference(pipeline, couple, fixture_path):
    reference = _reference(fixture_path(REFERENCE))
    result = pipeline.process(couple)
    assert result.task == "pose" and result.backend == "cpu"
    assert result.image_size == (couple.shape[1], couple.shape[0])
    assert len(result.poses) == len(reference)
    sx, sy = couple.shape[1] / INPUT_W, couple.shape[0] / INPUT_H
    for pose, rows in zip(result.poses, (reference[k] for k in sorted(reference)), strict=True):
        # Pose scores average 17 keypoint scores: within 0.01.
        assert pose.score == pytest.approx(float(rows[0]["pose_score"]), abs=0.01)
        assert [k.name.upper() for k in pose.keypoints] == [r["keypoint_label"] for r in rows]
        ours = np.array([(k.x / sx, k.y / sy) for k in pose.keypoints])  # back to model-input pixels
        theirs = np.array([(float(r["keypoint_x"]), float(r["keypoint_y"])) for r in rows])
        # LiteRT 2.3 (XNNPACK) and the TFLite that made the CSV round a few boundary values one LSB apart:
        # one heatmap step (0.047 logit) moves a keypoint score by <= 0.012 and a position by ~1 px.
        assert np.abs(ours - theirs).max() <= 1.5
        scores = np.array([k.score for k in pose.keypoints])
        assert np.abs(scores - [float(r["keypoint_score"]) for r in rows]).max() <= 0.02
    assert set(result.timings) == {"preprocess", "inference", "postprocess", "total"}


def test_threshold_and_max_results_take_effect_next_frame(pipeline, couple):
    everything = pipeline.process(couple)
    assert len(everything.poses) == 2
    lowest = min(p.score for p in everything.poses)
    done = threading.Event()

    def change():
        pipeline.set_options(score_threshold=lowest + 1e-3)
        done.set()

    threading.Thread(target=change).start()
    done.wait(5)
    assert len(pipeline.process(couple).poses) == 1
    with pytest.raises(ConfigError):
        pipeline.set_options(score_threshold=2.0)
    assert len(pipeline.process(couple).poses) == 1  # a bad update leaves the last good options
    pipeline.set_options(score_threshold=0.2, max_results=1)
    assert len(pipeline.process(couple).poses) == 1
    pipeline.set_options(max_results=10)
    assert len(pipeline.process(couple).poses) == 2


def test_bad_frames_are_image_errors(pipeline):
    with pytest.raises(ImageError, match="HxWx3 uint8"):
        pipeline.process(np.zeros((10, 10), np.uint8))
    with pytest.raises(ImageError, match="HxWx3 uint8"):
        pipeline.process(np.zeros((10, 10, 3), np.float32))


def test_describe_and_input_size(pipeline):
    assert pipeline.input_size == (INPUT_W, INPUT_H)
    info = pipeline.describe()
    assert info["task"] == "pose" and info["segments"][0]["twin_ops_dropped"] == ["PosenetDecoderOp"]
