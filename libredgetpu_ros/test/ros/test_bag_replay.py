"""replay on its own: the published bytes are the bag's bytes, in bag order, on every loop; /clock carries bag
time; QoS comes from the bag; SIGTERM stops a looping replay cleanly; bad requests are refused."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from libredgetpu_ros.errors import InputError

pytestmark = [pytest.mark.ros, pytest.mark.timeout(90)]

START_NS = 1_600_000_000_000_000_000
WAIT_S = 30.0


def _bag(tmp: Path, fixture_path: Any) -> tuple[Path, list[bytes]]:
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.bags.storage import open_reader

    bag = tmp / "bag"
    make_bag([fixture_path("images/cat.bmp"), fixture_path("images/grace_hopper.bmp")], bag,
             MakeBagOptions(topic="/cam/image_raw", rate=20.0, start_ns=START_NS, loop=2), progress=False)
    reader = open_reader(bag)
    raws = [bytes(raw) for _, _, raw in reader.messages()]
    reader.close()
    return bag, raws


def test_replay_publishes_the_bag_bytes_with_clock_and_loops(ros_env, fixture_path, tmp_path: Path) -> None:
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from rosgraph_msgs.msg import Clock
    from sensor_msgs.msg import Image

    bag, raws = _bag(tmp_path, fixture_path)
    context = ros_env.init_rclpy()
    node = Node("replay_listener", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    frames: list[bytes] = []
    clock: list[int] = []
    node.create_subscription(Image, "/cam/image_raw", frames.append, qos_profile_sensor_data, raw=True)
    node.create_subscription(Clock, "/clock", lambda m: clock.append(m.clock.sec * 10**9 + m.clock.nanosec),
                             100)
    replay = ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "replay", str(bag), "--loop",
                            "--clock", "50", "--wait-subscribers", "1", "--start-delay", "1"], "replay",
                           expect_exit=True)

    end = time.monotonic() + WAIT_S
    while time.monotonic() < end and len(frames) < 2 * len(raws) + 1:
        executor.spin_once(timeout_sec=0.05)
    assert len(frames) >= 2 * len(raws) + 1, f"got {len(frames)} frames"
    # Raw CDR in, raw CDR out: the subscriber sees exactly the recorded bytes, in order, loop after loop.
    first = frames.index(raws[0])
    assert frames[first:first + 2 * len(raws)] == raws + raws

    replay.send_signal(signal.SIGTERM)
    assert replay.wait(timeout=10) == 130  # interrupted: stopped cleanly, not killed
    log = (ros_env.work_dir / "replay.log").read_text()
    assert "replaying" in log and "(interrupted)" in log and "Traceback" not in log
    bag_end = START_NS + (len(raws) - 1) * 50_000_000
    assert clock and all(START_NS <= t <= bag_end for t in clock)
    assert START_NS in clock and bag_end in clock  # a tick with each message's own time


def test_qos_comes_from_the_bag(tmp_path: Path) -> None:
    from libredgetpu_ros.bags.storage import open_reader, open_writer, reliable_qos, sensor_data_qos
    from libredgetpu_ros.bags.typestore import typestore
    from libredgetpu_ros.ros.replay import qos_for
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy, qos_profile_sensor_data
    from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime

    never = QosTime(sec=0, nsec=0)
    latched = Qos(QosHistory.KEEP_LAST, 1, QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL,
                  never, never, QosLiveliness.AUTOMATIC, never, False)
    writer = open_writer(tmp_path / "bag", "mcap")
    store = typestore()
    writer.add_connection("/map_info", "std_msgs/msg/String", typestore=store, offered_qos_profiles=[latched])
    writer.add_connection("/mixed", "std_msgs/msg/String", typestore=store,
                          offered_qos_profiles=[reliable_qos(10), sensor_data_qos()])
    writer.add_connection("/image_raw", "sensor_msgs/msg/Image", typestore=store)
    writer.add_connection("/status", "std_msgs/msg/String", typestore=store)
    writer.close()
    reader = open_reader(tmp_path / "bag")
    qos = {c.topic: qos_for(c) for c in reader.connections}
    reader.close()
    assert qos["/map_info"].reliability == ReliabilityPolicy.RELIABLE
    assert qos["/map_info"].durability == DurabilityPolicy.TRANSIENT_LOCAL and qos["/map_info"].depth == 1
    assert qos["/mixed"].reliability == ReliabilityPolicy.BEST_EFFORT  # reliable only if all were
    assert qos["/mixed"].depth == 10
    assert qos["/image_raw"] == qos_profile_sensor_data
    assert qos["/status"].reliability == ReliabilityPolicy.RELIABLE and qos["/status"].depth == 10


def test_bad_requests_are_refused(ros_env, fixture_path, tmp_path: Path) -> None:
    from libredgetpu_ros.ros.replay import Replayer, ReplayOptions, message_class
    from rclpy.node import Node

    assert message_class("sensor_msgs/msg/Image").__name__ == "Image"
    for name in ("acme_msgs/msg/Thing", "sensor_msgs/Image", "sensor_msgs/msg/NoSuch"):
        with pytest.raises(InputError):
            message_class(name)
    bag, _ = _bag(tmp_path, fixture_path)
    node = Node("replay_refusals", context=ros_env.init_rclpy())
    with pytest.raises(InputError, match="has no topic /nope"):
        Replayer(node, bag, ReplayOptions(topics=("/nope",)))
    with pytest.raises(InputError, match="rate must be > 0"):
        Replayer(node, bag, ReplayOptions(rate=0.0))
    with pytest.raises(InputError, match="does not exist"):
        Replayer(node, tmp_path / "missing", ReplayOptions())
