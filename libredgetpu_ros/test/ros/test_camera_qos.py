"""The camera base's image QoS choice and its no-input warning (issue 22 item 2), in process.

Cross-process behaviour with a real 1080p driver is in test_image_qos.py; here: the ``auto`` rule for every
mix of publishers, and, on a real node over localhost DDS, the WARN after ``input_timeout`` s without a
frame, which lists the image topics that exist (not the node's own outputs) and comes once per silence.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from libredgetpu_ros.ros.camera.qos import choose_reliability

from .._helpers import load_helper

rig = load_helper(Path(__file__).resolve().parent / "_perception_rig.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(60)]
MODEL = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


@pytest.mark.parametrize(("setting", "publishers", "chosen"), [
    ("auto", [], "best_effort"),
    ("auto", ["reliable"], "reliable"),
    ("auto", ["reliable", "reliable"], "reliable"),
    ("auto", ["reliable", "best_effort"], "best_effort"),  # a reliable reader would not match the 2nd
    ("auto", ["best_effort"], "best_effort"),
    ("reliable", ["best_effort"], "reliable"),  # forced: the incompatibility is reported, not hidden
    ("best_effort", ["reliable"], "best_effort"),
])
def test_auto_matches_the_publishers(setting, publishers, chosen) -> None:
    assert choose_reliability(setting, publishers)[0] == chosen


def test_no_input_warns_once_with_the_image_topics_that_exist(ros_env, fixture_path, monkeypatch) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn
    from sensor_msgs.msg import CompressedImage

    with rig.in_process_perception(ros_env, "perception_silent", fixture_path(MODEL), "other_camera",
                                   input_timeout=0.5, diagnostics_period=0.2) as (node, camera, executor):
        camera.create_publisher(CompressedImage, "/front/image_raw/compressed", 10)
        warnings: list[str] = []
        warned_at: list[float] = []

        def warning(text: str) -> None:
            warnings.append(text)
            warned_at.append(time.monotonic())

        class Logger:
            def __getattr__(self, name: str):
                return warning if name == "warning" else (lambda *a, **k: None)

        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        monkeypatch.setattr(node, "get_logger", Logger)
        activated = time.monotonic()
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        silent = [w for w in warnings if w.startswith("no frame on /image_raw")]
        assert len(silent) == 1, warnings  # once per silence
        # the silence counts from activation: it once counted from 0, the machine's boot ("for 37538 s"),
        # and warned at the first diagnostics tick
        assert int(re.search(r"for (\d+) s", silent[0]).group(1)) <= 3, silent[0]
        at = warned_at[warnings.index(silent[0])]
        assert at - activated >= 0.5, (at - activated, silent[0])
        assert "/front/image_raw/compressed (CompressedImage)" in silent[0]
        assert "/annotated" not in silent[0]  # the node's own outputs are not cameras
        # nor its own input, which nobody publishes (it was listed as a topic "that exists")
        assert "/image_raw (Image)" not in silent[0].split("exist:", 1)[1]


def test_ros2_node_info_lists_the_image_subscription_on_the_node(ros_env, fixture_path) -> None:
    """Issue 22 item 6: the node's real main() in its own process; what ``ros2 node info /<ns>/perception``
    reads (the graph's subscriptions by node) lists the camera topic once active, and nothing once
    deactivated. Before, the subscription lived on a companion node ``perception_image``."""
    import sys

    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.perception_node", "--ros-args",
                   "-r", "__ns:=/info", "-p", "backend:=cpu",
                   "-p", f"model:={fixture_path(MODEL)}"],
                  "perception_info")
    node, executor = ros_env.probe("info_probe")
    change = node.create_client(ChangeState, "/info/perception/change_state")
    assert change.wait_for_service(timeout_sec=20.0)

    def transition(tid: int) -> None:
        future = change.call_async(ChangeState.Request(transition=Transition(id=tid)))
        executor.spin_until_future_complete(future, timeout_sec=20.0)
        assert future.done() and future.result().success

    def subscriptions() -> set[str]:
        return {name for name, _ in node.get_subscriber_names_and_types_by_node("perception", "/info")}

    transition(Transition.TRANSITION_CONFIGURE)
    transition(Transition.TRANSITION_ACTIVATE)
    end = time.monotonic() + 10.0
    while "/info/image_raw" not in subscriptions() and time.monotonic() < end:
        executor.spin_once(timeout_sec=0.1)
    assert "/info/image_raw" in subscriptions()
    assert "perception_image" not in node.get_node_names()  # no companion node any more
    transition(Transition.TRANSITION_DEACTIVATE)
    end = time.monotonic() + 10.0
    while "/info/image_raw" in subscriptions() and time.monotonic() < end:
        executor.spin_once(timeout_sec=0.1)
    assert "/info/image_raw" not in subscriptions()


def test_auto_chooses_again_when_publishers_come_and_go(ros_env, fixture_path) -> None:
    """In process: active with a reliable camera -> reliable; a best-effort one joins -> best_effort (the
    reliable reader reports it incompatible); it leaves -> reliable again (matched event)."""
    from rclpy.event_handler import PublisherEventCallbacks
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.qos import QoSProfile, QoSReliabilityPolicy
    from sensor_msgs.msg import Image

    with rig.in_process_perception(ros_env, "perception_auto", fixture_path(MODEL), "cameras") as (
            node, cameras, executor):
        def settle(wanted: str) -> str:
            end = time.monotonic() + 10.0
            while node._sub_reliability != wanted and time.monotonic() < end:
                executor.spin_once(timeout_sec=0.05)
            return node._sub_reliability

        cameras.create_publisher(Image, "image_raw", QoSProfile(depth=10))  # reliable
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        end = time.monotonic() + 10.0
        while not node.get_publishers_info_by_topic("/image_raw") and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        assert settle("reliable") == "reliable"
        best_effort = cameras.create_publisher(  # its own incompatible-QoS report silenced (rclpy's default
            # handler logs through a deprecated call); the node's is what the test is about
            Image, "image_raw", QoSProfile(depth=10, reliability=QoSReliabilityPolicy.BEST_EFFORT),
            event_callbacks=PublisherEventCallbacks(incompatible_qos=lambda event: None))
        assert settle("best_effort") == "best_effort"
        end = time.monotonic() + 1.5  # every matched event of the new subscription handled
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        assert node._sub_reliability == "best_effort"
        cameras.destroy_publisher(best_effort)
        assert settle("reliable") == "reliable"


def test_a_slow_camera_is_no_silent_one(ros_env, fixture_path) -> None:
    """A frame every 1.2 s, diagnostics every 0.4 s: no status says "no input" (most periods have no result,
    yet frames come, well within input_timeout); once the frames stop for input_timeout, it does. Before,
    every period without a result said "no input" (WARN): a model or camera slower than diagnostics_period
    flapped between OK and WARN, and the first tick after activation said so too."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    with rig.in_process_perception(ros_env, "perception_slow", fixture_path(MODEL), "slow_camera",
                                   input_timeout=2.0, diagnostics_period=0.4) as (node, camera, executor):
        frames = camera.create_publisher(Image, "/image_raw", qos_profile_sensor_data)
        statuses: list[tuple[float, str]] = []
        camera.create_subscription(DiagnosticArray, "/diagnostics", lambda m: statuses.extend(
            (time.monotonic(), s.message) for s in m.status if "perception_slow" in s.name), 10)
        frame = Image(height=128, width=128, encoding="rgb8", step=3 * 128, data=bytes(128 * 128 * 3))
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
        end = time.monotonic() + 5.0
        next_frame = time.monotonic()
        while time.monotonic() < end:
            if time.monotonic() >= next_frame:
                frames.publish(frame)
                next_frame += 1.2
            executor.spin_once(timeout_sec=0.05)
        assert node.stats.processed >= 3, node.stats.processed
        assert len(statuses) >= 8 and not [m for _, m in statuses if "no input" in m], statuses
        stopped = time.monotonic()
        while time.monotonic() < stopped + 3.5:
            executor.spin_once(timeout_sec=0.05)
        silent = [at for at, m in statuses if "no input" in m]
        assert silent and silent[0] - stopped >= 2.0 - 1.2, (stopped, statuses[-8:])
