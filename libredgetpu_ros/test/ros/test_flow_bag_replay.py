"""Bag replay == offline for the flow node: a bag of a moving texture (``make-bag``, 10 Hz stamps) is
replayed (``replay``, its own process) into a running flow node (its own process) over localhost DDS; the
node's TwistStamped and heading must equal, frame by frame by header stamp, what OpticalFlow + VisualCompass
compute offline in this process on the same images and stamps (floats within 1e-9). Replayed at half the
recorded speed: the rates come from the stamps, so the replay's speed must not matter (the stamps-vs-wall
clock point is test_flow_node's 10 Hz / 30 Hz test; a faster best-effort replay here lost frames to the
newest-frame policy, which changes the pairs). ``process-bag --node-type flow`` on the same bag with the
same parameters writes the same messages as the live node published (every field, floats within 1e-6, on
the same topics, at the input's bag timestamps)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

from .._helpers import load_helper

compare = load_helper(Path(__file__).resolve().parent / "_bag_compare.py")
scenes = load_helper(Path(__file__).resolve().parents[1] / "robotics" / "_flow_scenes.py")
supervision = load_helper(Path(__file__).resolve().parent / "_lifecycle_supervisor.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

WAIT_S = 40.0
START_NS = 1_700_000_000_000_000_000
FRAMES = 12
# reliable from the start: the replay offers the bag's reliable QoS, and an `auto` subscription made before
# the replay starts would be replaced when it appears (frames sent meanwhile are lost)
PARAMS = {"model": "gabor_64x64_p4", "backend": "cpu", "fov_deg": 70.0, "max_gap": 0.5,
          "input_topic": "/cam/image_raw", "image_reliability": "best_effort"}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "libredgetpu_ros.cli.main", *args]


def _frames(folder: Path) -> list[Path]:
    import cv2

    scene = scenes.texture(4, size=400)
    paths = []
    for k in range(FRAMES):  # 5 px right and 2 px down per frame, one flat frame in the middle
        frame = scenes.shifted_pair(scene, 5.0 * k - 30.0, 2.0 * k - 12.0, n=64)[1]
        if k == 6:
            frame[:] = 90
        path = folder / f"frame_{k:02d}.png"
        cv2.imwrite(str(path), frame)
        paths.append(path)
    return paths


def _offline(paths: list[Path]) -> dict[tuple[int, int], tuple[float, float, float, float]]:
    """(vx px/s, vy px/s, yaw rate, heading rad) by stamp, as the node computes them."""
    from libredgetpu_ros.perception.images import load_image
    from libredgetpu_ros.robotics.compass import VisualCompass
    from libredgetpu_ros.robotics.flow import OpticalFlow
    from libredgetpu_ros.ros.flow.node import centre_pixels

    out = {}
    with VisualCompass(OpticalFlow.from_template(PARAMS["model"], backend="cpu", max_gap=PARAMS["max_gap"]),
                       PARAMS["fov_deg"]) as compass:
        for k, path in enumerate(paths):
            rgb = load_image(path)
            stamp_ns = START_NS + k * 100_000_000
            sec, nsec = divmod(stamp_ns, 1_000_000_000)
            result = compass.step(rgb, sec + nsec * 1e-9)
            if result.valid and result.flow.dt > 0:
                vx = centre_pixels(result.yaw_deg, result.flow.vx, "pinhole", compass.fov_deg, 64)
                out[(sec, nsec)] = (vx / result.flow.dt, result.flow.vy / result.flow.dt, result.yaw_rate,
                                    math.radians(compass.heading_deg))
    return out


def test_replayed_bag_equals_offline(ros_env, tmp_path: Path) -> None:
    from geometry_msgs.msg import QuaternionStamped, TwistStamped
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.ros.camera import RESULT_QOS

    paths = _frames(tmp_path)
    bag = tmp_path / "camera_bag"
    make_bag(paths, bag, MakeBagOptions(topic="/cam/image_raw", rate=10.0, start_ns=START_NS), progress=False)
    offline = _offline(paths)
    assert len(offline) == FRAMES - 3  # no estimate: the first frame and the two pairs with the flat one

    args = [sys.executable, "-m", "libredgetpu_ros.ros.flow_node", "--ros-args", "-r", "__node:=flow"]
    for name, value in PARAMS.items():
        args += ["-p", f"{name}:={value}"]
    ros_env.spawn(args, "flow_node")
    sup = supervision.LifecycleSupervisor(ros_env, "flow_recorder", "/flow", WAIT_S)
    twists: list[Any] = []
    headings: list[Any] = []
    sup.node.create_subscription(TwistStamped, "/flow", twists.append, RESULT_QOS)
    sup.node.create_subscription(QuaternionStamped, "/heading", headings.append, RESULT_QOS)
    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for("the node's publishers",
                 lambda: sup.node.count_publishers("/flow") and sup.node.count_publishers("/heading"))
    replay = ros_env.spawn(_cli("replay", str(bag), "--rate", "0.5", "--wait-subscribers", "1",
                                "--wait-timeout", str(WAIT_S), "--start-delay", "2"), "replay")
    sup.wait_for(lambda: f"{FRAMES} headings (replay exit {replay.poll()})",
                 lambda: len(headings) >= FRAMES or (replay.poll() not in (None, 0)))
    assert replay.wait(timeout=WAIT_S) == 0, (ros_env.work_dir / "replay.log").read_text()
    sup.wait_for("the last twist", lambda: len(twists) >= len(offline))
    sup.executor.spin_once(timeout_sec=0.3)

    live = {(t.header.stamp.sec, t.header.stamp.nanosec): t for t in twists}
    heading_by_stamp = {(h.header.stamp.sec, h.header.stamp.nanosec): h for h in headings}
    assert set(live) == set(offline)
    for stamp, (vx, vy, yaw_rate, heading) in offline.items():
        twist = live[stamp].twist
        got = (twist.linear.x, twist.linear.y, twist.angular.z)
        assert got == pytest.approx((vx, vy, yaw_rate), abs=1e-9)
        q = heading_by_stamp[stamp].quaternion
        assert 2 * math.atan2(q.z, q.w) == pytest.approx(heading, abs=1e-9)
    _process_bag_equals_live(tmp_path, bag, {"/flow": live, "/heading": heading_by_stamp})
    mean_vx = sum(v[0] for v in offline.values()) / len(offline)
    print(f"{len(offline)} twists live == offline; mean vx {mean_vx:.1f} px/s (scene 50 px/s right)")


def _process_bag_equals_live(tmp: Path, bag: Path, live: dict[str, dict[tuple[int, int], Any]]) -> None:
    """``process-bag`` with the node's parameters (a ROS parameters file of the node ``/flow``) writes what
    the live node published, message for message."""
    import yaml
    from libredgetpu_ros.cli.main import main
    from rosbags.highlevel import AnyReader

    params = tmp / "flow_params.yaml"
    params.write_text(yaml.safe_dump({"/flow": {"ros__parameters": PARAMS}}))
    assert main(["process-bag", str(bag), str(tmp / "flow_bag"), "--config", str(params),
                 "--node-type", "flow"]) == 0
    offline: dict[str, dict[tuple[int, int], Any]] = {}
    with AnyReader([tmp / "flow_bag"]) as reader:
        for conn, timestamp, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            key = compare.stamp_key(msg)
            assert timestamp == key[0] * 10**9 + key[1]  # bag time = the input's bag time
            offline.setdefault(conn.topic, {})[key] = msg
    # publish_marker (default true): offline writes the arrow with every twist, as live for a subscriber
    assert sorted(offline) == ["/flow", "/flow_estimate", "/flow_marker", "/heading"]
    assert len(offline["/heading"]) == FRAMES and set(offline["/flow_marker"]) == set(offline["/flow"])
    assert set(offline["/flow"]) <= set(offline["/flow_estimate"])  # every pair; the valid ones also on /flow
    for topic, by_stamp in live.items():
        assert set(offline[topic]) == set(by_stamp), topic
        for key, msg in by_stamp.items():
            compare.assert_same_message(compare.plain(msg), compare.plain(offline[topic][key]),
                                        f"{topic}@{key}")
