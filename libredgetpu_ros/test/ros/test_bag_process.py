"""process-bag on a damaged bag (built with rosbags directly): truncated CDR, a type that is not an image on
the camera topic, an unsupported encoding, an undecodable JPEG, a topic of an unknown type. Everything is
processed to the end; failures are counted per cause and logged once per cause; results of the good frames
equal the pipeline run directly on the same pixels (raw and JPEG). Also: config formats, exit codes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from libredgetpu_ros.errors import ConfigError, InputError

from ._camera_bags import (
    CLASSIFY,
    COMPRESSED,
    COMPRESSED_IMAGE,
    RAW,
    RIHS_UNKNOWN,
    classify_config,
    decoded,
    image_cdr,
    open_camera_bag,
)

pytestmark = pytest.mark.ros  # process-bag runs the nodes' processing and rclpy's serializers


def _damaged_bag(path: Path, rgb: np.ndarray, jpeg: bytes, storage: str = "mcap") -> None:
    with open_camera_bag(path, storage) as bag:
        bag.connection(RAW), bag.connection(COMPRESSED, COMPRESSED_IMAGE)
        for topic, msgtype, msgdef in ((RAW, "acme_msgs/msg/Thing", "int32 x"),
                                       ("/imu", "acme_msgs/msg/Imu", "float64 ax")):
            bag.connection(topic, msgtype, msgdef=msgdef, rihs01=RIHS_UNKNOWN)  # types rosbags does not know
        good = image_cdr(bag.store, rgb, 1 * 10**9)
        bag.write(RAW, 1 * 10**9, good)
        bag.write(RAW, 2 * 10**9, image_cdr(bag.store, rgb, 2 * 10**9)[: len(good) // 2])  # truncated CDR
        bag.write(RAW, 3 * 10**9, image_cdr(bag.store, rgb, 3 * 10**9)[:40])  # truncated in the header
        bag.image(4 * 10**9, rgb, encoding="32FC1")
        bag.write(RAW, 5 * 10**9, b"\x00\x01\x00\x00\x07\x00\x00\x00", "acme_msgs/msg/Thing")
        bag.write("/imu", 5 * 10**9, b"\x00\x01\x00\x00" + bytes(8), "acme_msgs/msg/Imu")
        bag.compressed(6 * 10**9, jpeg)
        bag.compressed(7 * 10**9, b"\xff\xd8 not really a jpeg")
        bag.image(8 * 10**9, rgb)


def _results(bag: Path) -> dict[int, Any]:
    from rosbags.highlevel import AnyReader

    with AnyReader([bag]) as reader:
        return {ts: reader.deserialize(raw, c.msgtype) for c, ts, raw in reader.messages()}


def test_damaged_bag_is_processed_to_the_end(ros_env, tmp_path: Path, fixture_path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import cv2
    from libredgetpu_ros.cli.main import main
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline, PipelineConfig

    rgb = load_image(fixture_path("images/cat.bmp"))
    ok, jpeg = cv2.imencode(".jpg", rgb[:, :, ::-1])
    assert ok
    _damaged_bag(tmp_path / "in", rgb, jpeg.tobytes())
    config = classify_config(tmp_path, fixture_path)

    code = main(["process-bag", str(tmp_path / "in"), str(tmp_path / "out"), "--config", str(config),
                 "--topics", "/image_raw", "/image_raw/compressed"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "8 frames" in out and "3 processed" in out and "5 failed" in out
    for cause, n in (("corrupt", 2), ("encoding", 1), ("unsupported_type", 1), ("decode", 1)):
        assert f"warning: {n} frame(s) failed: {cause}" in out, cause
        assert err.count(f"skipping frames ({cause})") == 1, cause  # logged once per cause
    assert "/imu [acme_msgs/msg/Imu]" in out

    # Independent reference: the pipeline on the decoded pixels (raw frames: the file; JPEG: OpenCV's decode).
    cfg = PipelineConfig(model=str(fixture_path(CLASSIFY)), backend="cpu", task="classify", top_k=3,
                         max_results=3, score_threshold=0.0)
    with PerceptionPipeline.from_config(cfg) as pipeline:
        from_raw = pipeline.process(rgb).classes
        from_jpeg = pipeline.process(cv2.imdecode(jpeg, cv2.IMREAD_COLOR)[:, :, ::-1].copy()).classes
    results = _results(tmp_path / "out")
    assert sorted(results) == [1 * 10**9, 6 * 10**9, 8 * 10**9]  # bag time = input time, only good frames
    for ts, expected in ((1 * 10**9, from_raw), (6 * 10**9, from_jpeg), (8 * 10**9, from_raw)):
        msg = results[ts]
        header = msg.header
        assert (header.stamp.sec, header.stamp.nanosec, header.frame_id) == (ts // 10**9, 0, "cam")
        assert [r.class_id for r in msg.results] == [str(c.class_id) for c in expected]
        np.testing.assert_allclose([r.score for r in msg.results], [c.score for c in expected], atol=1e-6)


def _clean_bag(path: Path, rgb: np.ndarray, storage: str) -> None:
    with open_camera_bag(path, storage) as bag:
        for i, encoding in enumerate(("rgb8", "bgr8", "rgb8")):
            pixels = rgb[:, :, ::-1] if encoding == "bgr8" else np.roll(rgb, 40 * i, axis=1)
            bag.image((i + 1) * 10**9, pixels, encoding=encoding)


@pytest.mark.parametrize("bag", ["damaged", "clean"])
def test_mcap_views_and_rosbags_reader_give_the_same_output(ros_env, tmp_path: Path, fixture_path,
                                                            bag: str) -> None:
    """mcap input is read zero-copy (``bags.mcap_view``: inline for raw Images only, else in the reader
    thread), sqlite3 input by rosbags in the thread: the same frames must give the same output bag,
    annotated images included."""
    import cv2
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.ros.bag_processing import process_bag

    rgb = load_image(fixture_path("images/cat.bmp"))
    jpeg = cv2.imencode(".jpg", rgb[:, :, ::-1])[1].tobytes()
    config = classify_config(tmp_path, fixture_path, publish_annotated=True)
    topics = ["/image_raw", "/image_raw/compressed"] if bag == "damaged" else ["/image_raw"]
    outputs = []
    for storage in ("mcap", "sqlite3"):
        if bag == "damaged":
            _damaged_bag(tmp_path / f"in_{storage}", rgb, jpeg, storage)
        else:
            _clean_bag(tmp_path / f"in_{storage}", rgb, storage)
        summary = process_bag(tmp_path / f"in_{storage}", tmp_path / f"out_{storage}", config,
                              progress=False, storage="mcap", topics=topics, log=lambda _: None)
        expected = (8, 3, 6) if bag == "damaged" else (3, 3, 6)
        assert (summary.frames, summary.processed, summary.written) == expected
        # The frame loop's CPU time (every thread) beside its wall time: the rate a loaded machine can judge.
        assert summary.cpu_s > 0.0 and summary.as_dict()["cpu_s"] == summary.cpu_s
        outputs.append(decoded(tmp_path / f"out_{storage}"))
    assert outputs[0] == outputs[1]
    assert {m[0] for m in outputs[0]} == {"/classification", "/annotated"}


@pytest.mark.parametrize(("storage", "thread"), [("mcap", None), ("mcap", True), ("sqlite3", None)])
def test_frame_reader_frames_stay_valid_until_the_next(ros_env, tmp_path: Path, storage: str,
                                                       thread: bool | None) -> None:
    """Raw frames of mcap are read inline (zero-copy), others in a thread that runs ahead: either way a frame
    the consumer holds (here, while a thread has time to fill its queue) keeps its pixels and header."""
    import time

    from libredgetpu_ros.ros.bag_reader import FrameReader

    with open_camera_bag(tmp_path / "in", storage) as bag:
        for i in range(12):
            bag.image(i, np.full((6, 8, 3), i, np.uint8))
    seen = []
    with FrameReader(tmp_path / "in", ["/image_raw"], thread=thread) as frames:
        assert frames.threaded == (thread or storage == "sqlite3")
        for frame in frames:
            time.sleep(0.02)  # the thread fills the queue meanwhile
            assert frame.rgb is not None and frame.stamp == (0, frame.timestamp, "cam")
            assert (frame.rgb == frame.timestamp).all(), frame.timestamp
            seen.append(frame.timestamp)
    assert seen == list(range(12))


def test_nothing_processable_exits_1_and_bad_input_exits_2(ros_env, tmp_path: Path, fixture_path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from libredgetpu_ros.cli.main import main

    with open_camera_bag(tmp_path / "bad", "sqlite3") as bag:
        bag.image(10, np.zeros((4, 4, 3), np.uint8), encoding="16UC1")
    config = classify_config(tmp_path, fixture_path)
    assert main(["process-bag", str(tmp_path / "bad"), str(tmp_path / "o1"), "--config", str(config)]) == 1
    assert "no frame could be processed" in capsys.readouterr().err
    assert any(p.suffix == ".db3" for p in (tmp_path / "o1").iterdir())  # default storage: the input's
    bad, cfg = str(tmp_path / "bad"), str(config)
    assert main(["process-bag", str(tmp_path / "missing"), str(tmp_path / "o2"), "--config", cfg]) == 2
    wrong_topic = ["--topics", "/camera/image_raw"]
    assert main(["process-bag", bad, str(tmp_path / "o3"), "--config", cfg, *wrong_topic]) == 2
    assert "no image topic /camera/image_raw" in capsys.readouterr().err
    bad_config = str(classify_config(tmp_path, fixture_path, "bad.yaml", score_threshold=3.0))
    assert main(["process-bag", bad, str(tmp_path / "o4"), "--config", bad_config]) == 2
    assert "score_threshold" in capsys.readouterr().err
    assert main(["process-bag", bad, str(tmp_path / "o1"), "--config", cfg]) == 2
    assert "already exists" in capsys.readouterr().err


def test_config_formats_resolve_the_node_topics(tmp_path: Path) -> None:
    from libredgetpu_ros.ros.bag_processing import load_node_config

    path = tmp_path / "c.yaml"
    path.write_text("/robot/perception:\n  ros__parameters:\n    model: m_edgetpu.tflite\n    top_k: 2\n")
    node = load_node_config(path)
    assert (node.namespace, node.name, node.params.top_k) == ("/robot", "perception", 2)
    assert node.params.backend == "auto"  # defaults fill in what the file leaves out
    assert node.resolve(node.params.input_topic) == "/robot/image_raw"
    assert node.resolve("/abs") == "/abs" and node.resolve("~/debug") == "/robot/perception/debug"

    path.write_text("nodes:\n  - type: perception\n    namespace: cam\n    parameters:\n"
                    "      model: x.tflite\n")
    node = load_node_config(path, {"backend": "cpu"})
    assert node.resolve("poses") == "/cam/poses" and node.params.backend == "cpu"

    # A bringup file's remappings: matched on the expanded name, first match wins (rcl's rule).
    path.write_text("nodes:\n  - type: perception\n    namespace: cam\n    remappings:\n"
                    "      image_raw: /front/color/image_raw\n      /cam/poses: people\n"
                    "    parameters:\n      model: x.tflite\n"
                    "      qos_overrides: {/cam/people: {publisher: {depth: 1}}}\n")
    node = load_node_config(path)  # qos_overrides are the live publishers': accepted, unused offline
    assert node.resolve(node.params.input_topic) == "/front/color/image_raw"
    path.write_text(path.read_text() + "      deactivate_timeout: 3.0\n")  # the live lifecycle's: unused
    node = load_node_config(path)
    # rclpy's use_sim_time too (a live node's params file for `replay --clock`): was an unknown parameter
    path.write_text(path.read_text() + "      use_sim_time: true\n")
    node = load_node_config(path)
    with pytest.raises(ConfigError, match="use_sim_time"):  # checked as the live node checks it
        load_node_config(path, {"use_sim_time": "often"})
    assert node.resolve(node.params.input_topic) == "/front/color/image_raw"
    assert node.resolve("poses") == "/cam/people" and node.resolve("labels") == "/cam/labels"

    for text, message in (("/**:\n  ros__parameters:\n    modle: x\n", "unknown parameter"),
                          ("nodes:\n  - type: control\n", "exactly one perception node"),
                          ("cameras: []\n", "expected a bringup file"),
                          # malformed parameters: a ConfigError naming them (was a TypeError traceback)
                          ("/**:\n  ros__parameters: [1, 2]\n", "ros__parameters must be a mapping"),
                          ("/**:\n  ros__parameters:\n    7: 3\n    top_k: 2\n", "unknown parameter.*7"),
                          ("nodes:\n  - type: perception\n    parameters:\n      7: x\n      modle: y\n",
                           "unknown parameter.*7, modle")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_node_config(path)
    with pytest.raises(InputError):
        load_node_config(tmp_path / "absent.yaml")


def test_vision_msgs_outputs_label_map_and_a_bomb_frame(ros_env, tmp_path: Path, fixture_path) -> None:
    """With labels: the output bag holds vision_msgs/Classification (class ids as strings) and, once at the
    first frame's time, the latched vision_msgs/LabelInfo; rosbags decodes both from the definitions the bag
    carries. A compressed frame of 30000 x 30000 (the PNG bomb) is a ``too_large`` failure, not decoded."""
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.ros.bag_processing import process_bag
    from rosbags.highlevel import AnyReader

    from ._crafted_images import png_bomb

    rgb = load_image(fixture_path("images/cat.bmp"))
    with open_camera_bag(tmp_path / "in") as bag:
        bag.image(2 * 10**9, rgb)
        bag.compressed(3 * 10**9, png_bomb(30000, 30000), fmt="png")
    config = classify_config(tmp_path, fixture_path, labels=str(fixture_path("labels/imagenet_labels.txt")),
                     score_threshold=0.05)
    failures: list[str] = []
    summary = process_bag(tmp_path / "in", tmp_path / "out", config, progress=False, log=failures.append,
                          topics=["/image_raw", "/image_raw/compressed"])
    assert (summary.frames, summary.processed, dict(summary.failures)) == (2, 1, {"too_large": 1})
    assert "30000x30000" in failures[0]

    with AnyReader([tmp_path / "out"]) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        messages = [(c.topic, ts, reader.deserialize(data, c.msgtype)) for c, ts, data in reader.messages()]
        qos = next(c for c in reader.connections if c.topic == "/label_info").ext.offered_qos_profiles
    assert types == {"/classification": "vision_msgs/msg/Classification",
                     "/label_info": "vision_msgs/msg/LabelInfo"}
    assert "transient_local" in str(qos).lower()
    (label_ts, labels), = [(ts, m) for t, ts, m in messages if t == "/label_info"]
    assert label_ts == 2 * 10**9 and labels.threshold == pytest.approx(0.05)
    names = {c.class_id: c.class_name for c in labels.class_map}
    assert len(names) > 1000
    (cls,) = [m for t, _, m in messages if t == "/classification"]
    top = cls.results[0]
    assert top.class_id.isdigit() and "cat" in names[int(top.class_id)]
