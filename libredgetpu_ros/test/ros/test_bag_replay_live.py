"""Offline == live: a bag made from fixture images is replayed (``replay``, its own process) into a running
perception node (``bringup``, its own process) over localhost DDS; this process records the node's output
topics as serialized messages. ``process-bag`` on the same bag with the same config must produce the same
messages, matched frame by frame by header stamp: every field equal (floats within 1e-6). (Raw CDR bytes are
not compared: alignment padding is not guaranteed to be zeroed.) The offline bag is decoded by rosbags with
only the definitions stored in it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from .._helpers import load_helper

HERE = Path(__file__).resolve().parent
compare = load_helper(HERE / "_bag_compare.py")
supervision = load_helper(HERE / "_lifecycle_supervisor.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(150)]

WAIT_S = 60.0
START_NS = 1_700_000_000_000_000_000
CASES = {
    # task: (model, storage, output topics, task-specific parameters)
    "pose": ("posenet/posenet_mobilenet_v1_075_481_641_quant_decoder_edgetpu.tflite", "mcap",
             ["/cam/poses", "/cam/markers"], {"score_threshold": 0.2, "publish_markers": True}),
    "classify": ("classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite", "sqlite3",
                 ["/cam/classification"], {"score_threshold": 0.0, "top_k": 3,
                                           "labels": "$(fixture labels/imagenet_labels.txt)"}),
}
IMAGES = ["images/cat.bmp", "images/grace_hopper.bmp", "images/test_couple.jpg"]


def _bringup_file(tmp: Path, model: str, task: str, extra: dict[str, Any]) -> Path:
    import yaml

    params = {"model": f"$(fixture {model})", "backend": "cpu", "task": task, "input_topic": "image_raw",
              "diagnostics_period": 1.0, **extra}
    path = tmp / f"bringup_{task}.yaml"
    path.write_text(yaml.safe_dump({"nodes": [{"type": "perception", "name": "perception", "namespace": "cam",
                                               "parameters": params}]}))
    return path


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "libredgetpu_ros.cli.main", *args]


def _record_live(ros_env: Any, bag: Path, config: Path, topics: list[str], frames: int
                 ) -> dict[str, dict[tuple[int, int], bytes]]:
    """Start the node, subscribe to its outputs, replay the bag into it; serialized results by topic."""
    from libredgetpu_ros.ros.conversions import output_topics
    from libredgetpu_ros.ros.perception_node import RESULT_QOS
    from rclpy.serialization import deserialize_message

    types = {f"/cam/{name}": cls for task in ("pose", "classify") for name, cls in output_topics(task)}
    ros_env.spawn(_cli("bringup", str(config)), "node")
    probe = supervision.Probe(ros_env, "bag_recorder", WAIT_S)
    recorded: dict[str, list[bytes]] = {t: [] for t in topics}
    for topic in topics:
        probe.node.create_subscription(types[topic], topic, recorded[topic].append, RESULT_QOS, raw=True)

    # The node's result publishers exist once it is configured; only then start the camera. The replay waits
    # for the node's subscription, then 1 s more: matching is not symmetric at once, and a best-effort frame
    # sent before the node's side has matched is lost.
    probe.wait_for("the node's result publishers",
                   lambda: all(probe.node.count_publishers(t) for t in topics))
    replay = ros_env.spawn(_cli("replay", str(bag), "--rate", "0.5", "--wait-subscribers", "1",
                                "--wait-timeout", str(WAIT_S), "--start-delay", "1"), "replay")
    probe.wait_for(lambda: f"{frames} results on each topic (replay exit {replay.poll()}, got "
                   f"{ {t: len(v) for t, v in recorded.items()} })",
                   lambda: replay.poll() is not None and (replay.returncode != 0 or all(
                       len(v) >= frames for v in recorded.values())))
    assert replay.returncode == 0, (ros_env.work_dir / "replay.log").read_text()
    by_stamp: dict[str, dict[tuple[int, int], bytes]] = {}
    for topic, messages in recorded.items():
        by_stamp[topic] = {compare.stamp_key(deserialize_message(raw, types[topic])): raw for raw in messages}
    return by_stamp


@pytest.mark.parametrize("task", sorted(CASES))
def test_replayed_live_results_equal_process_bag(ros_env, fixture_path, tmp_path: Path, task: str) -> None:
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.ros.bag_processing import process_bag
    from rclpy.serialization import deserialize_message
    from rosbags.highlevel import AnyReader

    model, storage, topics, extra = CASES[task]
    bag = tmp_path / "camera_bag"
    make_bag([fixture_path(i) for i in IMAGES], bag,
             MakeBagOptions(topic="/cam/image_raw", rate=2.0, storage=storage, start_ns=START_NS),
             progress=False)
    config = _bringup_file(tmp_path, model, task, extra)

    live = _record_live(ros_env, bag, config, topics, len(IMAGES))
    summary = process_bag(bag, tmp_path / "results_bag", config, progress=False)
    assert (summary.frames, summary.processed, dict(summary.failures)) == (len(IMAGES), len(IMAGES), {})
    suffix = ".mcap" if storage == "mcap" else ".db3"
    assert any(p.suffix == suffix for p in (tmp_path / "results_bag").iterdir())  # the input's storage

    offline: dict[str, dict[tuple[int, int], tuple[int, Any, bytes]]] = {t: {} for t in topics}
    with AnyReader([tmp_path / "results_bag"]) as reader:  # only the definitions stored in the bag
        # The label map of a model with labels is written once (latched), at the first frame's time.
        labelled = "labels" in extra
        latched = ["/cam/label_info"] if labelled else []
        assert sorted(c.topic for c in reader.connections) == sorted(topics + latched)
        for conn, timestamp, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            if conn.topic in latched:
                assert (timestamp, conn.msgtype) == (START_NS, "vision_msgs/msg/LabelInfo")
                assert len(msg.class_map) > 1000  # ImageNet
                continue
            offline[conn.topic][compare.stamp_key(msg)] = (timestamp, msg, bytes(raw))

    # Frames are 0.5 s apart (2 Hz); results are keyed by the (sec, nanosec) stamp of their input frame.
    expected_keys = {divmod(START_NS + i * 500_000_000, 10**9) for i in range(len(IMAGES))}
    for topic in topics:
        assert set(live[topic]) == expected_keys, topic
        assert set(offline[topic]) == expected_keys, topic
        for key in sorted(expected_keys):
            timestamp, off_msg, _ = offline[topic][key]
            assert timestamp == key[0] * 10**9 + key[1]  # bag time = input bag time
            live_msg = deserialize_message(live[topic][key], type_of(topic))
            compare.assert_same_message(compare.plain(live_msg), compare.plain(off_msg), f"{topic}@{key}")
    if task == "pose":  # not vacuous: the couple image has people in it
        couple = offline["/cam/poses"][max(expected_keys)][1]
        assert len(couple.poses) >= 2


def type_of(topic: str) -> type:
    from libredgetpu_ros.ros.conversions import output_topics

    return dict(output_topics("pose") + output_topics("classify"))[topic.rsplit("/", 1)[1]]
