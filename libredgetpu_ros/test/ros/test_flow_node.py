"""The flow node as a separate process over real (localhost-only) DDS, driven from outside like a robot.

This process plays camera, CameraInfo publisher and supervisor: it publishes stamped frames of a texture
moving at a known speed, drives the lifecycle through ``/<node>/change_state``, and reads ``flow``
(TwistStamped), ``heading`` and ``/diagnostics``. Checked: rates from the header stamps (the same scene
speed filmed at 10 Hz and at 30 Hz gives the same px/s), header copied, a stamp gap and the first frame
publish nothing, bad input (frames of another size, all-black/all-white/constant frames, wrong encodings)
is counted while the node stays active and never publishes NaN, the field of view from CameraInfo.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

scenes = load_helper(Path(__file__).resolve().parents[1] / "robotics" / "_flow_scenes.py")
supervision = load_helper(Path(__file__).resolve().parent / "_lifecycle_supervisor.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

WAIT_S = 20.0
NODE = "flow_test"
SPEED = 60.0  # px/s of the scene in 64-pixel frames: 6 px (1.5 grid steps) at 10 Hz, 2 px at 30 Hz


class Supervisor(supervision.LifecycleSupervisor):
    def __init__(self, ros_env: Any) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import QuaternionStamped, TwistStamped, TwistWithCovarianceStamped
        from libredgetpu_ros.ros.camera import RESULT_QOS
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import CameraInfo, Image

        super().__init__(ros_env, "flow_supervisor", f"/{NODE}", WAIT_S)
        self.camera = self.node.create_publisher(Image, "image_raw", qos_profile_sensor_data)
        self.info = self.node.create_publisher(CameraInfo, "camera_info", 10)
        self.twists: list[Any] = []
        self.headings: list[Any] = []
        self.diagnostics: list[dict[str, str]] = []
        self.node.create_subscription(TwistStamped, "flow", self.twists.append, RESULT_QOS)
        self.estimates: list[Any] = []
        self.node.create_subscription(TwistWithCovarianceStamped, "flow_estimate", self.estimates.append,
                                      RESULT_QOS)
        self.node.create_subscription(QuaternionStamped, "heading", self.headings.append, RESULT_QOS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)

    def _on_diag(self, msg: Any) -> None:
        for status in msg.status:
            if status.name.endswith(": flow"):
                self.diagnostics.append({kv.key: kv.value for kv in status.values}
                                        | {"_level": int.from_bytes(status.level, "little")
                                           if isinstance(status.level, bytes) else int(status.level),
                                           "_message": status.message})

    def frame(self, gray: np.ndarray, stamp: float, encoding: str = "mono8",
              data: bytes | None = None) -> Any:
        from sensor_msgs.msg import Image

        height, width = gray.shape[:2]
        msg = Image(height=height, width=width, encoding=encoding, step=width,
                    data=gray.tobytes() if data is None else data)
        msg.header.frame_id = "camera_optical"
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(stamp), round((stamp % 1) * 1e9)
        return msg

    def publish_frames(self, frames: list[np.ndarray], stamps: list[float], wall_period: float) -> None:
        """Publish at ``wall_period`` (wall clock) frames stamped ``stamps`` (camera clock), waiting for the
        node to be matched first."""
        self.wait_for("the node's image subscription", lambda: self.camera.get_subscription_count())
        for gray, stamp in zip(frames, stamps, strict=True):
            self.camera.publish(self.frame(gray, stamp))
            self.spin_for(wall_period)

    def latest_diagnostics(self) -> dict[str, str]:
        count = len(self.diagnostics)
        self.wait_for("a new diagnostics status", lambda: len(self.diagnostics) > count)
        return self.diagnostics[-1]


def _spawn(ros_env: Any, **params: Any) -> None:
    args = [sys.executable, "-m", "libredgetpu_ros.ros.flow_node", "--ros-args", "-r", f"__node:={NODE}"]
    defaults = {"model": "gabor_64x64_p4", "backend": "cpu", "max_gap": 0.5, "diagnostics_period": 0.3,
                "fov_deg": 60.0}
    for name, value in {**defaults, **params}.items():
        args += ["-p", f"{name}:={value}"]
    ros_env.spawn(args, "flow_node")


def _moving(count: int, step_px: float, seed: int = 1) -> list[np.ndarray]:
    """``count`` 64x64 frames of a texture moving right by ``step_px`` per frame."""
    scene = scenes.texture(seed, size=400)
    return [scenes.shifted_pair(scene, step_px * k - 40.0, 0.0, n=64)[1] for k in range(count)]


def _stamp_key(msg: Any) -> tuple[int, int]:
    return msg.header.stamp.sec, msg.header.stamp.nanosec


@pytest.fixture
def supervisor(ros_env) -> Supervisor:
    _spawn(ros_env)
    sup = Supervisor(ros_env)
    assert sup.transition("configure") and sup.transition("activate")
    assert sup.state() == "active"
    return sup


def test_rates_come_from_stamps_10hz_and_30hz_agree(supervisor: Supervisor) -> None:
    sup = supervisor
    rates = {}
    for hz, start in ((10.0, 100.0), (30.0, 200.0)):  # 100 s apart: the second run starts a new pair
        frames = _moving(12 if hz == 10 else 30, SPEED / hz)
        stamps = [start + k / hz for k in range(len(frames))]
        # published as fast as the node takes them: the wall clock must not matter
        before = len(sup.twists)
        sup.publish_frames(frames, stamps, wall_period=0.05)
        wanted = len(frames) - 1
        sup.wait_for(f"{wanted} twists at {hz} Hz", lambda n=wanted, b=before: len(sup.twists) - b >= n)
        mine = sup.twists[before:]
        assert {_stamp_key(t) for t in mine} <= {(int(s), round((s % 1) * 1e9)) for s in stamps[1:]}
        assert all(t.header.frame_id == "camera_optical" for t in mine)
        rates[hz] = float(np.mean([t.twist.linear.x for t in mine]))
        assert all(abs(t.twist.linear.y) < 0.5 * 4 * hz for t in mine)
        assert all(math.isfinite(t.twist.angular.z) for t in mine)
    print(f"scene at {SPEED} px/s: read {rates[10.0]:.1f} px/s at 10 Hz, {rates[30.0]:.1f} px/s at 30 Hz")
    assert rates[10.0] == pytest.approx(SPEED, rel=0.15)
    assert rates[30.0] == pytest.approx(SPEED, rel=0.15)
    assert abs(rates[10.0] - rates[30.0]) <= 0.15 * SPEED
    # a left turn is positive yaw (REP 103): the scene moved right, so angular.z > 0
    assert np.mean([t.twist.angular.z for t in sup.twists]) > 0
    # ~/reset_heading: the integrated heading back to 0
    from std_srvs.srv import Trigger

    reset = sup.node.create_client(Trigger, f"/{NODE}/reset_heading")
    assert reset.wait_for_service(timeout_sec=WAIT_S)
    assert float(sup.latest_diagnostics()["heading_deg"]) != 0.0
    answer = sup.call(reset, Trigger.Request())
    assert answer.success and answer.message.endswith("-> 0")
    sup.wait_for("heading 0 in diagnostics", lambda: float(sup.latest_diagnostics()["heading_deg"]) == 0.0)
    # runtime parameters: applied at once when valid, refused with the range otherwise
    assert sup.set_param("fov_deg", 80.0).successful
    assert sup.wait_for("fov 80 in diagnostics", lambda: float(sup.latest_diagnostics()["fov_deg"]) == 80.0)
    assert not sup.set_param("min_confidence", 1.5).successful


def test_gap_first_frame_and_bad_input_publish_nothing(supervisor: Supervisor) -> None:
    sup = supervisor
    frames = _moving(6, 4.0)
    stamps = [10.0, 10.1, 10.2, 12.0, 12.1, 12.2]  # 1.8 s gap > max_gap 0.5 between the 3rd and 4th
    sup.publish_frames(frames, stamps, wall_period=0.05)
    sup.wait_for("4 twists", lambda: len(sup.twists) >= 4)
    sup.spin_for(0.5)
    published = sorted(_stamp_key(t) for t in sup.twists)
    assert published == [(10, 100_000_000), (10, 200_000_000), (12, 100_000_000), (12, 200_000_000)]
    diag = sup.latest_diagnostics()
    assert diag["no_estimate_gap"] == "1" and diag["no_estimate_first_frame"] == "1"

    # bad input: every kind counted, the node stays active, nothing (and no NaN) is published for it
    twists = len(sup.twists)
    black, white = np.zeros((64, 64), np.uint8), np.full((64, 64), 255, np.uint8)
    constant = np.full((64, 64), 131, np.uint8)
    bad = [sup.frame(black, 12.3), sup.frame(white, 12.4), sup.frame(constant, 12.5),
           sup.frame(frames[0], 12.6, encoding="32FC1"),  # an encoding the node cannot read
           sup.frame(frames[0], 12.7, data=b"\x00" * 17),  # size does not match width x height
           sup.frame(np.tile(frames[0][:48], (1, 2))[:, :80].copy(), 12.8),  # another frame size
           sup.frame(frames[1], 12.9)]
    sup.wait_for("the node's image subscription", lambda: sup.camera.get_subscription_count())
    for msg in bad:
        sup.camera.publish(msg)
        sup.spin_for(0.05)
    sup.spin_for(1.0)
    diag = sup.latest_diagnostics()
    assert int(diag["no_estimate_low_texture"]) >= 3  # black, white, constant
    assert int(diag["no_estimate_size_changed"]) >= 1
    assert sup.state() == "active"
    assert len(sup.twists) == twists
    for t in sup.twists:
        assert all(math.isfinite(v) for v in (t.twist.linear.x, t.twist.linear.y, t.twist.angular.z))
    assert any(key.startswith("bad_input") or "bad" in key for key in diag), diag
    # it still works afterwards
    more = _moving(3, 4.0, seed=2)
    sup.publish_frames(more, [30.0, 30.1, 30.2], wall_period=0.05)
    sup.wait_for("twists after the bad input", lambda: len(sup.twists) >= twists + 2)

    # a camera looking at a blank wall: reported as such in diagnostics (WARN), not as motion
    twists = len(sup.twists)
    seen = len(sup.diagnostics)
    walls = [np.full((64, 64), 60 + k, np.uint8) for k in range(12)]
    sup.publish_frames(walls, [40.0 + 0.1 * k for k in range(12)], wall_period=0.05)

    def no_estimate_warn() -> dict[str, str] | None:
        return next((d for d in sup.diagnostics[seen:]
                     if d["_level"] == 1 and "no motion estimate" in d["_message"]), None)

    warn = sup.wait_for("a no-estimate WARN", no_estimate_warn)
    assert "low_texture" in warn["_message"]
    assert len(sup.twists) == twists
    # flow_estimate carries every pair and says what it is: the walls' pairs are "not available" (-1), the
    # moving scene's were valid with a small stated sigma
    from libredgetpu_ros.ros.flow.messages import NOT_AVAILABLE, confidence_of

    walls_stamped = [m for m in sup.estimates if m.header.stamp.sec >= 40]
    assert walls_stamped and all(m.twist.covariance[0] == NOT_AVAILABLE and m.twist.twist.linear.x == 0.0
                                 for m in walls_stamped)
    moving = [m for m in sup.estimates if 30 <= m.header.stamp.sec < 40 and m.twist.covariance[0] >= 0]
    assert moving and all(confidence_of(m.twist.covariance[0], 0.1) > 0.9 for m in moving)


def test_field_of_view_from_camera_info(supervisor: Supervisor) -> None:
    from sensor_msgs.msg import CameraInfo

    sup = supervisor
    info = CameraInfo(width=64, height=64)
    info.k = [32.0, 0.0, 31.5, 0.0, 32.0, 31.5, 0.0, 0.0, 1.0]  # fx = width / 2: 90 degrees
    sup.wait_for("the node's camera info subscription", lambda: sup.info.get_subscription_count())
    for _ in range(3):
        sup.info.publish(info)
        sup.spin_for(0.1)
    diag = sup.wait_for("fov from camera info",
                        lambda: (d := sup.latest_diagnostics()).get("fov_source") == "camera_info" and d)
    assert float(diag["fov_deg"]) == pytest.approx(90.0, abs=1e-3)
    refused = sup.set_param("fov_deg", 45.0)
    assert not refused.successful and "CameraInfo" in refused.reason
    bad = CameraInfo(width=64, height=64)  # fx = 0: ignored, counted
    sup.info.publish(bad)
    sup.spin_for(0.5)
    assert float(sup.latest_diagnostics()["fov_deg"]) == pytest.approx(90.0, abs=1e-3)


def test_compressed_camera(ros_env) -> None:
    """input_type compressed: PNG frames (lossless) give the same twists as the raw frames offline."""
    import cv2
    from libredgetpu_ros.robotics.compass import VisualCompass
    from libredgetpu_ros.robotics.flow import OpticalFlow
    from libredgetpu_ros.ros.flow.node import centre_pixels
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CompressedImage

    _spawn(ros_env, input_type="compressed", input_topic="image_raw/compressed")
    sup = Supervisor(ros_env)
    camera = sup.node.create_publisher(CompressedImage, "image_raw/compressed", qos_profile_sensor_data)
    assert sup.transition("configure") and sup.transition("activate")
    frames = _moving(5, 3.0, seed=5)
    sup.wait_for("the node's image subscription", lambda: camera.get_subscription_count())
    for k, gray in enumerate(frames):
        msg = CompressedImage(format="png", data=cv2.imencode(".png", gray)[1].tobytes())
        msg.header.stamp.sec, msg.header.stamp.nanosec = 50, k * 100_000_000
        camera.publish(msg)
        sup.spin_for(0.1)
    sup.wait_for("4 twists", lambda: len(sup.twists) >= 4)
    with VisualCompass(OpticalFlow.from_template("gabor_64x64_p4", backend="cpu"), 60.0) as compass:
        for k, gray in enumerate(frames):
            result = compass.step(np.repeat(gray[:, :, None], 3, axis=2), 50 + k * 0.1)
            if k:
                vx = centre_pixels(result.yaw_deg, result.flow.vx, "pinhole", 60.0, 64) / result.flow.dt
                live = next(t for t in sup.twists if t.header.stamp.nanosec == k * 100_000_000)
                assert live.twist.linear.x == pytest.approx(vx, abs=1e-6)
