"""Offline == live for the robotics camera nodes: ``process-bag --node-type tracker|looming`` writes what the
live nodes publish for the same bag.

One bag (a red spot crossing the frame left to right, lost for two frames and back, over a textured wall the
camera approaches: a target to servo on and an approach to loom; rendered by the scene kit), one ``bringup``
process running a spot tracker (namespace ``servo``, reading the absolute ``/cam/image_raw``) and a looming
node (namespace ``cam``), one ``replay`` process; this process records every output topic serialized.
``process-bag`` on the same bag with the same bringup file must give the same messages, matched by header
stamp, on the same topics (resolved in each node's namespace), with the input's bag timestamps: every field
equal, floats within 1e-6 (``_bag_compare``). The looming node's tau history and time to contact run on the
frames' header stamps, so they match too. The offline bag is decoded by rosbags with only the definitions
stored in it."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

ROS_TESTS = Path(__file__).resolve().parents[1] / "ros"
compare = load_helper(ROS_TESTS / "_bag_compare.py")
supervision = load_helper(ROS_TESTS / "_lifecycle_supervisor.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(150)]

WAIT_S = 60.0
START_NS = 1_700_000_000_000_000_000
FRAMES = 7
TRACKER_TOPICS = ["/servo/offset", "/servo/servo_error", "/servo/target", "/servo/markers",
                  "/servo/annotated"]
LOOMING_TOPICS = ["/cam/looming", "/cam/markers", "/cam/annotated"]


LOST = (3, 4)  # frames without the red spot: no offset, zero servo error, an empty target array


def _frames() -> list[np.ndarray]:
    """64x64 RGB at 5 Hz: a grey textured wall approached at 1 m/s from 3 m (looming) and a red spot moving
    right near the top (tracker), missing from the frames in LOST."""
    import cv2
    from libredgetpu_ros.scenes import presets, textures

    scene = presets.motion_scene("approach", textures.natural(5, 256), start_m=3.0, fps=5.0, frames=FRAMES,
                                 noise=2.0, seed=5)
    out = []
    for i, frame in enumerate(scene):
        rgb = frame.image.copy()
        if i not in LOST:
            cv2.circle(rgb, (8 + 8 * i, 6), 4, (255, 0, 0), -1)
        out.append(rgb)
    return out


def _expected(topic: str) -> int:
    """Messages each topic gets from the bag: an offset only for frames with a valid target."""
    return FRAMES - len(LOST) if topic.endswith("/offset") else FRAMES


def _types() -> dict[str, type]:
    from geometry_msgs.msg import PointStamped, Vector3Stamped
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Detection2DArray
    from visualization_msgs.msg import MarkerArray

    from libredgetpu_ros_interfaces.msg import Looming

    return {"/servo/offset": PointStamped, "/servo/servo_error": Vector3Stamped,
            "/servo/target": Detection2DArray,
            "/servo/markers": MarkerArray, "/servo/annotated": Image, "/cam/looming": Looming,
            "/cam/markers": MarkerArray, "/cam/annotated": Image}


def _bringup_file(tmp: Path) -> Path:
    import yaml

    common = {"backend": "cpu", "publish_markers": True, "publish_annotated": True, "diagnostics_period": 1.0}
    nodes = [{"type": "tracker", "name": "tracker", "namespace": "servo",
              "parameters": {**common, "module": "spot", "template": "color_red_64x64", "gain": 2.0,
                             "input_topic": "/cam/image_raw"}},
             {"type": "looming", "name": "looming", "namespace": "cam",
              "parameters": {**common, "template": "looming_64x64_3x3", "ttc_window": 4}}]
    path = tmp / "robotics_bringup.yaml"
    path.write_text(yaml.safe_dump({"nodes": nodes}))
    return path


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "libredgetpu_ros.cli.main", *args]


def _record_live(ros_env: Any, bag: Path, config: Path) -> dict[str, dict[tuple[int, int], Any]]:
    """Start both nodes, subscribe to every output, replay the bag into them; messages by topic and stamp."""
    from libredgetpu_ros.ros.camera import RESULT_QOS
    from rclpy.serialization import deserialize_message

    types = _types()
    ros_env.spawn(_cli("bringup", str(config)), "nodes")
    probe = supervision.Probe(ros_env, "bag_recorder", WAIT_S)
    recorded: dict[str, list[bytes]] = {t: [] for t in types}
    for topic, cls in types.items():
        probe.node.create_subscription(cls, topic, recorded[topic].append, RESULT_QOS, raw=True)
    probe.wait_for("the nodes' result publishers", lambda: all(probe.node.count_publishers(t) for t in types))
    # newest-frame-only nodes: 2.5 frames/s leaves each frame time to be processed before the next comes
    replay = ros_env.spawn(_cli("replay", str(bag), "--rate", "0.5", "--wait-subscribers", "2",
                                "--wait-timeout", str(WAIT_S), "--start-delay", "1"), "replay")
    probe.wait_for(lambda: f"{FRAMES} results on each topic (replay exit {replay.poll()}, got "
                   f"{ {t: len(v) for t, v in recorded.items()} })",
                   lambda: replay.poll() is not None and (replay.returncode != 0 or all(
                       len(v) >= _expected(t) for t, v in recorded.items())))
    assert replay.returncode == 0, (ros_env.work_dir / "replay.log").read_text()
    out: dict[str, dict[tuple[int, int], Any]] = {}
    for topic, raws in recorded.items():
        msgs = [deserialize_message(raw, types[topic]) for raw in raws]
        out[topic] = {compare.stamp_key(m): m for m in msgs}
    return out


def _read_offline(path: Path) -> dict[str, dict[tuple[int, int], tuple[int, Any]]]:
    from rosbags.highlevel import AnyReader

    offline: dict[str, dict[tuple[int, int], tuple[int, Any]]] = {}
    with AnyReader([path]) as reader:  # only the definitions stored in the bag
        for conn, timestamp, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            offline.setdefault(conn.topic, {})[compare.stamp_key(msg)] = (timestamp, msg)
    return offline


def test_tracker_and_looming_bag_replayed_live_equal_process_bag(ros_env, tmp_path: Path, capsys) -> None:
    import cv2
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.cli.main import main

    files = []
    for i, frame in enumerate(_frames()):
        files.append(tmp_path / f"frame{i}.png")
        cv2.imwrite(str(files[-1]), cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    bag = tmp_path / "camera_bag"
    make_bag(files, bag, MakeBagOptions(topic="/cam/image_raw", rate=5.0, start_ns=START_NS), progress=False)
    config = _bringup_file(tmp_path)

    # Two camera nodes in the file: process-bag asks which one.
    assert main(["process-bag", str(bag), str(tmp_path / "either"), "--config", str(config)]) == 2
    assert "--node-type" in capsys.readouterr().err
    for node_type in ("tracker", "looming"):
        assert main(["process-bag", str(bag), str(tmp_path / node_type), "--config", str(config),
                     "--node-type", node_type]) == 0
        assert f"{FRAMES} processed, " in capsys.readouterr().out

    live = _record_live(ros_env, bag, config)
    keys = {divmod(START_NS + i * 200_000_000, 10**9) for i in range(FRAMES)}  # 5 Hz
    for node_type, topics in (("tracker", TRACKER_TOPICS), ("looming", LOOMING_TOPICS)):
        offline = _read_offline(tmp_path / node_type)
        assert sorted(offline) == sorted(topics), node_type  # resolved in the node's namespace
        for topic in topics:
            visible = {k for i, k in enumerate(sorted(keys)) if i not in LOST}
            want = visible if topic == "/servo/offset" else keys
            assert set(live[topic]) == want and set(offline[topic]) == want, topic
            for key in sorted(want):
                timestamp, off_msg = offline[topic][key]
                assert timestamp == key[0] * 10**9 + key[1]  # bag time = the input's bag time
                compare.assert_same_message(compare.plain(live[topic][key]), compare.plain(off_msg),
                                            f"{topic}@{key}")

    # Not vacuous: the spot moves right across the frame and is lost for two frames: no offset then, a zero
    # servo error, no target (live and offline alike); the wall looms: a TTC in seconds once the history
    # spans 0.1 s, close to the truth (3 m at 1 m/s: 3 - t), from the header stamps.
    ordered = sorted(keys)
    seen = [k for i, k in enumerate(ordered) if i not in LOST]
    xs = [live["/servo/offset"][k].point.x for k in seen]
    assert xs[0] < -0.4 and xs[-1] > 0.4 and all(b > a for a, b in itertools.pairwise(xs))
    for i, key in enumerate(ordered):
        error, target = live["/servo/servo_error"][key].vector, live["/servo/target"][key]
        if i in LOST:
            assert (error.x, error.y) == (0.0, 0.0) and len(target.detections) == 0
        else:
            assert error.x != 0.0 and len(target.detections) == 1
    looming = [live["/cam/looming"][k] for k in ordered]
    assert [m.ttc_valid for m in looming][:1] == [False] and all(m.ttc_valid for m in looming[2:])
    assert looming[0].ttc_reason == "filling" and all(m.ttc_reason == "ok" for m in looming[2:])
    for i, m in enumerate(looming[2:], start=2):
        assert m.ttc == pytest.approx(3.0 - 0.2 * i, rel=0.1)


def test_node_type_choice_and_config_errors(tmp_path: Path) -> None:
    import argparse

    from libredgetpu_ros.cli import process_bag_cmd
    from libredgetpu_ros.errors import ConfigError
    from libredgetpu_ros.ros.bag_nodes import OFFLINE_NODES
    from libredgetpu_ros.ros.bag_processing import load_node_config

    parser = argparse.ArgumentParser()
    process_bag_cmd.add_arguments(parser)
    choices = next(a.choices for a in parser._actions if a.dest == "node_type")
    assert tuple(choices) == tuple(OFFLINE_NODES)  # the CLI offers every offline node, no other

    config = _bringup_file(tmp_path)
    tracker = load_node_config(config, {"backend": "edgetpu"}, "tracker")
    assert (tracker.node_type, tracker.namespace, tracker.name) == ("tracker", "/servo", "tracker")
    assert tracker.params.backend == "edgetpu" and tracker.params.gain == 2.0
    assert tracker.resolve(tracker.params.input_topic) == "/cam/image_raw"
    looming = load_node_config(config, None, "looming")
    assert looming.resolve("looming") == "/cam/looming" and looming.params.ttc_window == 4
    with pytest.raises(ConfigError, match="choose one with --node-type"):
        load_node_config(config)
    with pytest.raises(ConfigError, match="expected exactly one perception node"):
        load_node_config(config, None, "perception")
    with pytest.raises(ConfigError, match="process-bag runs perception, tracker, looming"):
        load_node_config(config, None, "control")

    params = tmp_path / "looming.yaml"
    params.write_text("/robot/looming:\n  ros__parameters:\n    template: looming_64x64_3x3\n"
                      "    contact_tau: 3.0\n")
    node = load_node_config(params, None, "looming")
    assert (node.namespace, node.name, node.params.contact_tau) == ("/robot", "looming", 3.0)
    assert node.resolve(node.params.input_topic) == "/robot/image_raw"
    with pytest.raises(ConfigError, match="unknown parameter"):  # a looming file read as perception's
        load_node_config(params)


def _write_bag(path: Path, frames: list[tuple[int, np.ndarray]]) -> None:
    """A camera bag of (header stamp ns, RGB frame), at bag times 0.1 s apart in the order given."""
    import cv2
    from libredgetpu_ros.bags.make import IMAGE_TYPE, image_cdr
    from libredgetpu_ros.bags.storage import new_bag, sensor_data_qos
    from libredgetpu_ros.bags.typestore import typestore

    with new_bag(path, "mcap") as writer:
        conn = writer.add_connection("/image_raw", IMAGE_TYPE, typestore=typestore(),
                                     offered_qos_profiles=[sensor_data_qos()])
        for i, (stamp, rgb) in enumerate(frames):
            writer.write(conn, START_NS + i * 10**8,
                         image_cdr(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), stamp, "cam", "rgb8"))


def test_process_bag_refused_frames_and_stamps_going_back(tmp_path: Path) -> None:
    """Tracker with ``resize: false``: frames of another size are refused as the node refuses them (counted
    under ``image``, nothing written for them, the others processed). Looming over a looped bag (stamps go
    back): the tau history restarts there, as the live node's does (``frames_in_history``)."""
    import yaml
    from libredgetpu_ros.ros.bag_processing import process_bag
    from rosbags.highlevel import AnyReader

    frames = _frames()
    small = [(START_NS + i * 10**8, f) for i, f in enumerate(frames[:3])]
    large = [(START_NS + 10**9 + i * 10**8, np.repeat(np.repeat(f, 2, 0), 2, 1))
             for i, f in enumerate(frames[3:5])]
    _write_bag(tmp_path / "mixed", small + large)
    tracker = tmp_path / "tracker.yaml"
    tracker.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "module": "spot", "template": "color_red_64x64", "backend": "cpu", "resize": False,
        "publish_markers": False}}}))
    logged: list[str] = []
    summary = process_bag(tmp_path / "mixed", tmp_path / "mixed_out", tracker, node_type="tracker",
                          progress=False, log=logged.append)
    assert (summary.frames, summary.processed, dict(summary.failures)) == (5, 3, {"image": 2})
    assert len(logged) == 1 and "128x128" in logged[0]  # once per cause, naming the size
    with AnyReader([tmp_path / "mixed_out"]) as reader:
        written = sorted((c.topic, t) for c, t, _ in reader.messages())
    assert written == sorted((topic, START_NS + i * 10**8) for i in range(len(small))
                             for topic in ("/offset", "/servo_error", "/target"))

    looped = [(START_NS + i * 10**8, f) for i, f in enumerate(frames[:4])]
    # played again (ros2 bag play --loop, recorded): bag time goes on, the header stamps go back
    looped += [(START_NS + i * 10**8, f) for i, f in enumerate(frames[:3])]
    _write_bag(tmp_path / "looped", looped)
    looming = tmp_path / "looming.yaml"
    looming.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "template": "looming_64x64_3x3", "backend": "cpu", "ttc_window": 4, "publish_markers": False}}}))
    summary = process_bag(tmp_path / "looped", tmp_path / "looped_out", looming, node_type="looming",
                          progress=False)
    assert summary.processed == len(looped)
    with AnyReader([tmp_path / "looped_out"]) as reader:
        msgs = [reader.deserialize(raw, c.msgtype) for c, _, raw in reader.messages()]
    assert [m.frames_in_history for m in msgs] == [1, 2, 3, 4, 1, 2, 3]
    assert msgs[3].ttc_valid and not msgs[4].ttc_valid
    assert (msgs[3].ttc_reason, msgs[4].ttc_reason) == ("ok", "filling")  # why there is none, in the bag
