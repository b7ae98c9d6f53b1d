"""The tracker and looming nodes as separate processes over real (localhost-only) DDS, driven from outside.

This process plays camera and supervisor (lifecycle through ``change_state``, the swap services, results
read back by stamp); the bag case replays a bag from a third process (``replay``) and compares the node's
Looming messages with the node's own detector run offline on the bag's frames and stamps."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

supervision = load_helper(Path(__file__).resolve().parents[1] / "ros" / "_lifecycle_supervisor.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(240)]

WAIT_S = 60.0  # bounds each single wait: two nodes starting at once on a loaded machine take long to appear


class Supervisor(supervision.LifecycleSupervisor):
    def __init__(self, ros_env: Any, node: str, results: dict[str, type]) -> None:
        from libredgetpu_ros.ros.camera import RESULT_QOS
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image

        super().__init__(ros_env, "test_supervisor", f"/{node}", WAIT_S)
        self.camera = self.node.create_publisher(Image, "image_raw", qos_profile_sensor_data)
        self.received: dict[str, list[Any]] = {topic: [] for topic in results}
        for topic, mtype in results.items():
            self.node.create_subscription(mtype, topic, self.received[topic].append, RESULT_QOS)
        self._stamp = 0

    def frame(self, rgb: np.ndarray, stamp_s: float | None = None, data: bytes | None = None) -> Any:
        from sensor_msgs.msg import Image

        self._stamp += 1
        stamp = 1000.0 + self._stamp if stamp_s is None else stamp_s
        msg = Image(height=rgb.shape[0], width=rgb.shape[1], encoding="rgb8", step=rgb.shape[1] * 3,
                    data=rgb.tobytes() if data is None else data)
        msg.header.frame_id = "test_camera"
        msg.header.stamp.sec, msg.header.stamp.nanosec = int(stamp), round((stamp % 1) * 1e9)
        return msg

    def result_for(self, topic: str, frame: Any) -> Any:
        """Publish ``frame`` (again each second: best effort) until ``topic``'s result for its stamp comes."""
        stamp = (frame.header.stamp.sec, frame.header.stamp.nanosec)

        def match() -> Any:
            return next((m for m in self.received[topic]
                         if (m.header.stamp.sec, m.header.stamp.nanosec) == stamp), None)

        return self.wait_for(f"{topic} for stamp {stamp}", match, every=lambda: self.camera.publish(frame))


def _params(tmp: Path, name: str, **params: Any) -> Path:
    import yaml

    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": {"backend": "cpu", "diagnostics_period": 0.3,
                                                                 **params}}}))
    return path


def _spawn(ros_env: Any, module: str, params: Path, name: str, namespace: str = "") -> Any:
    args = [sys.executable, "-m", f"libredgetpu_ros.ros.robotics.{module}", "--ros-args", "-r",
            f"__node:={name}", "--params-file", str(params)]
    if namespace:
        args += ["-r", f"__ns:=/{namespace}"]
    return ros_env.spawn(args, name)


def _spots(*spots: tuple[int, int, tuple[int, int, int]], size: int = 64) -> np.ndarray:
    import cv2

    image = np.zeros((size, size, 3), np.uint8)
    for x, y, rgb in spots:
        cv2.circle(image, (x, y), max(3, size // 16), rgb, -1)
    return image


def test_spot_tracker_node_offsets_colour_swap_and_bad_input(ros_env, tmp_path: Path) -> None:
    from geometry_msgs.msg import PointStamped, Vector3Stamped

    from libredgetpu_ros_interfaces.srv import SetColor, SetTemplateRegion

    _spawn(ros_env, "tracker_node", _params(tmp_path, "spot", module="spot", template="color_red_64x64",
                                            gain=2.0), "tracker")
    from diagnostic_msgs.msg import DiagnosticArray

    sup = Supervisor(ros_env, "tracker", {"offset": PointStamped, "servo_error": Vector3Stamped,
                                          "/diagnostics": DiagnosticArray})
    assert sup.transition("configure") and sup.transition("activate") and sup.state() == "active"

    red, green = (255, 0, 0), (0, 255, 0)
    frame = sup.frame(_spots((24, 63, red), (104, 63, green), size=128))  # resized to 64x64 by the node
    offset = sup.result_for("offset", frame)
    assert offset.header.frame_id == "test_camera" and offset.point.x < -0.4 and abs(offset.point.y) < 0.15
    error = sup.result_for("servo_error", frame)
    assert error.vector.x == pytest.approx(-2.0 * offset.point.x, abs=1e-6)

    answer = sup.service(SetColor, "set_color", r=-0.5, g=1.0, b=-0.5)
    assert answer.success and answer.version == 1 and list(answer.weights) == [-64, 127, -64]
    both = sup.frame(_spots((24, 63, red), (104, 63, green), size=128))
    assert sup.result_for("offset", both).point.x > 0.4
    sup.received["/diagnostics"].clear()  # a status sent between the swap and that frame still says left

    def diagnostics() -> dict[str, str] | None:  # the node's latest status, once it reports the new colour
        for msg in reversed(sup.received["/diagnostics"]):
            for status in msg.status:
                values = {kv.key: kv.value for kv in status.values}
                if status.name.endswith(": tracker") and values.get("parameters_version") == "1":
                    return values
        return None

    status = sup.wait_for("diagnostics with parameters_version 1", diagnostics)
    assert status["module"] == "spot" and status["direction"] == "right" and "track_ms" in " ".join(status)
    refused = sup.service(SetColor, "set_color", r=float("nan"), g=0.0, b=0.0)
    assert not refused.success and "nan" in refused.message and refused.version == 1
    wrong = sup.service(SetTemplateRegion, "set_template_region", x=0, y=0, width=8, height=8)
    assert not wrong.success and "pattern" in wrong.message
    sup.camera.publish(sup.frame(np.zeros((64, 64, 3), np.uint8), data=b"\x00" * 10))  # truncated: bad input
    assert sup.result_for("offset", sup.frame(_spots((52, 31, green)))).point.x > 0.4  # still running
    assert sup.state() == "active"
    assert sup.transition("deactivate") and sup.transition("cleanup") and sup.state() == "unconfigured"


def test_pattern_tracker_node_takes_the_template_from_a_region(ros_env, tmp_path: Path,
                                                               fixture_path) -> None:
    import cv2
    from geometry_msgs.msg import PointStamped, Vector3Stamped

    from libredgetpu_ros_interfaces.srv import SetTemplateRegion

    _spawn(ros_env, "tracker_node", _params(tmp_path, "pattern", module="pattern",
                                            template="pattern_64x64_8x8_1ch"), "follower")
    sup = Supervisor(ros_env, "follower", {"offset": PointStamped, "servo_error": Vector3Stamped})
    assert sup.transition("configure") and sup.transition("activate")
    rgb = cv2.cvtColor(cv2.imread(str(fixture_path("images/grace_hopper.bmp"))), cv2.COLOR_BGR2RGB)
    photo = cv2.resize(rgb, (128, 128), interpolation=cv2.INTER_AREA)  # frames are 2x the model input
    gray = cv2.cvtColor(cv2.resize(photo, (64, 64), interpolation=cv2.INTER_AREA), cv2.COLOR_RGB2GRAY)
    _, px, py = max((gray[y:y + 8, x:x + 8].std(), x, y) for y in range(16, 40, 2) for x in range(16, 40, 2))
    # the node has a last frame now (the template's own patch is not in the photo: no valid offset, but a
    # servo error of zero for every frame)
    assert sup.result_for("servo_error", sup.frame(photo)).vector.x == 0.0
    answer = sup.service(SetTemplateRegion, "set_template_region", x=2 * px, y=2 * py, width=16, height=16)
    assert answer.success and (answer.patch_x, answer.patch_y) == (px, py) and answer.version == 1
    for dx, dy in ((0, 0), (8, -6), (-10, 4)):  # frame pixels: model-input shifts of dx/2, dy/2
        shifted = cv2.warpAffine(photo, np.float32([[1, 0, dx], [0, 1, dy]]), (128, 128),
                                 borderMode=cv2.BORDER_REFLECT)
        offset = sup.result_for("offset", sup.frame(shifted))
        grid = 64 - 8 + 1
        col = (offset.point.x + 1) * (grid - 1) / 2
        row = (offset.point.y + 1) * (grid - 1) / 2
        assert abs(col - (px + dx / 2)) <= 2 and abs(row - (py + dy / 2)) <= 2
    outside = sup.service(SetTemplateRegion, "set_template_region", x=120, y=120, width=16, height=16)
    assert not outside.success and "not inside" in outside.message and outside.version == 1
    assert sup.state() == "active"
    # Paused and resumed: the patch is cut from a frame of now (it was cut from the last one before the pause)
    assert sup.transition("deactivate") and sup.transition("activate")
    stale = sup.service(SetTemplateRegion, "set_template_region", x=2 * px, y=2 * py, width=16, height=16)
    assert not stale.success and "no frame processed yet" in stale.message and stale.version == 1


def _on_image_plane(sup: Supervisor, frame: Any, ns: str, k: tuple[float, float, float, float]) -> Any:
    """Publish the camera's CameraInfo (``ns``/camera_info, beside its image; calibrated at twice the
    frame's size: the node scales K) and ``frame`` until the node's markers for that frame lie on the image
    plane (z > 0; without CameraInfo they lie on z = 0)."""
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import CameraInfo

    fx, fy, cx, cy = k
    info = CameraInfo(header=frame.header, width=2 * frame.width, height=2 * frame.height,
                      k=[2 * fx, 0.0, 2 * cx, 0.0, 2 * fy, 2 * cy, 0.0, 0.0, 1.0])
    pub = sup.node.create_publisher(CameraInfo, f"{ns}/camera_info", qos_profile_sensor_data)
    stamp = (frame.header.stamp.sec, frame.header.stamp.nanosec)
    # best effort: a CameraInfo or frame sent before its publisher matched the node's subscription is lost,
    # and the node builds markers only for a subscriber it sees; the CameraInfo goes out first, but the
    # node may still take the frame first (both ready at once on a loaded machine): the frame is sent
    # again each second until its markers lie on the plane
    sup.wait_for("the node's image and camera_info subscriptions and its markers publisher",
                 lambda: pub.get_subscription_count() > 0 and sup.camera.get_subscription_count() > 0
                 and sup.node.count_publishers(f"{ns}/markers") > 0)
    pub.publish(info)

    def placed(msg: Any) -> bool:  # a MarkerArray has no header: its markers carry the frame's
        drawn = [m for m in msg.markers if m.action == m.ADD and m.type != m.LINE_LIST]
        return bool(drawn) and all((m.header.stamp.sec, m.header.stamp.nanosec) == stamp
                                   and m.pose.position.z > 0.1 for m in drawn)

    return sup.wait_for("markers on the image plane",
                        lambda: next((m for m in sup.received[f"{ns}/markers"] if placed(m)), None),
                        every=lambda: (pub.publish(info), sup.camera.publish(frame)))


def _pixel(point: Any, k: tuple[float, float, float, float]) -> tuple[float, float]:
    """The camera image's pixel an optical-frame point projects onto (where rviz's Camera display puts it)."""
    fx, fy, cx, cy = k
    return fx * point.x / point.z + cx, fy * point.y / point.z + cy


def test_tracker_and_looming_markers_on_the_cameras_image_plane(ros_env, tmp_path: Path) -> None:
    """With the camera's CameraInfo beside its image, the tracker's target sphere projects onto the target's
    pixel in the camera image (the target detection's centre, on the red disc), the centre cross onto the
    image centre, and each looming cube onto its zone's centre, at marker_depth; frames are 2x the
    templates' input (template pixels mapped back through the resize). The tracker runs in a namespace."""
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Detection2DArray
    from visualization_msgs.msg import MarkerArray

    k = (150.0, 140.0, 63.0, 65.0)  # fx, fy, cx, cy of the 128 x 128 frames
    _spawn(ros_env, "tracker_node", _params(tmp_path, "spot", module="spot", template="color_red_64x64",
                                            marker_depth=2.5), "tracker", namespace="front")
    _spawn(ros_env, "looming_node", _params(tmp_path, "looming", template="looming_64x64_3x3"), "looming")
    tracker = Supervisor(ros_env, "front/tracker", {"/front/markers": MarkerArray,
                                                    "/front/target": Detection2DArray})
    tracker.camera = tracker.node.create_publisher(Image, "/front/image_raw", qos_profile_sensor_data)
    assert tracker.transition("configure") and tracker.transition("activate")
    frame = tracker.frame(_spots((90, 40, (255, 0, 0)), size=128))
    target, centre = _on_image_plane(tracker, frame, "/front", k).markers
    assert target.pose.position.z == pytest.approx(2.5) and target.header.frame_id == "test_camera"
    (det,) = tracker.result_for("/front/target", frame).detections
    u, v = _pixel(target.pose.position, k)
    assert (u, v) == (pytest.approx(det.bbox.center.position.x, abs=1e-3),
                      pytest.approx(det.bbox.center.position.y, abs=1e-3))
    assert abs(u - 90) < 3 and abs(v - 40) < 3  # on the disc
    assert np.mean([_pixel(p, k) for p in centre.points], axis=0) == pytest.approx((63.5, 63.5))

    looming = Supervisor(ros_env, "looming", {"/markers": MarkerArray})
    assert looming.transition("configure") and looming.transition("activate")
    frame = looming.frame(_looming_frames(1)[0].repeat(2, 0).repeat(2, 1))
    cubes = _on_image_plane(looming, frame, "", k).markers
    assert len(cubes) == 9 and all(c.pose.position.z == pytest.approx(1.0) for c in cubes)  # marker_depth
    for cube in cubes:
        row, col = divmod(cube.id, 3)
        want = ((col + 0.5) * 128 / 3 - 0.5, (row + 0.5) * 128 / 3 - 0.5)
        assert _pixel(cube.pose.position, k) == (pytest.approx(want[0], abs=1e-3),
                                                 pytest.approx(want[1], abs=1e-3))


def _looming_frames(count: int, kind: str = "approach") -> list[np.ndarray]:
    """64x64 RGB frames of a textured wall 3 m ahead, the camera approaching at 1 m/s (10 Hz) or still
    (the scene kit, docs/scenes.md)."""
    from libredgetpu_ros.scenes import presets, textures

    frames = presets.motion_scene(kind, textures.natural(9, 256), start_m=3.0, fps=10.0, frames=count,
                                  noise=2.0, seed=9)
    return [f.image for f in frames]


def _offline(params: dict[str, Any], frames: list[np.ndarray], stamps: list[float]) -> list[Any]:
    """The node's own detector (open_detector with the node's parameter values) on the same frames/stamps."""
    from libredgetpu_ros.ros.robotics.looming_node import LoomingNode
    from libredgetpu_ros.ros.robotics.processors import open_detector

    values = {spec.name: spec.default for spec in LoomingNode.PARAMS.specs.values()} | params
    detector = open_detector(type("P", (), values))
    try:
        return [detector.detect(f, s) for f, s in zip(frames, stamps, strict=True)]
    finally:
        detector.close()


def _same(live: Any, offline: Any) -> None:
    np.testing.assert_array_equal(np.array(live.zones, np.float32), offline.zones.reshape(-1))
    assert live.tau == pytest.approx(offline.tau, rel=1e-6)
    assert live.ttc_valid == (offline.ttc_s is not None) == offline.ttc_valid
    assert live.ttc_reason == offline.ttc_reason and live.ttc_reason
    if live.ttc_valid:
        assert live.ttc == pytest.approx(offline.ttc_s, rel=1e-5, abs=1e-6)


def test_looming_node_live_equals_offline(ros_env, tmp_path: Path) -> None:
    from diagnostic_msgs.msg import DiagnosticArray

    from libredgetpu_ros_interfaces.msg import Looming

    params = {"template": "looming_64x64_3x3", "ttc_window": 4}
    _spawn(ros_env, "looming_node", _params(tmp_path, "looming", **params), "looming")
    sup = Supervisor(ros_env, "looming", {"looming": Looming})
    diags: list[Any] = []
    sup.node.create_subscription(DiagnosticArray, "/diagnostics", diags.append, 10)
    assert sup.transition("configure") and sup.transition("activate")
    frames = _looming_frames(7)
    stamps = [500.0 + 0.1 * i for i in range(len(frames))]
    live = [sup.result_for("looming", sup.frame(f, s)) for f, s in zip(frames, stamps, strict=True)]
    for msg, want in zip(live, _offline(params, frames, stamps), strict=True):
        _same(msg, want)
    assert live[-1].zones_per_side == 3 and not live[0].ttc_valid and all(m.ttc_valid for m in live[2:])
    for i, msg in enumerate(live[2:], start=2):  # a time in seconds: 3 m at 1 m/s
        assert msg.ttc == pytest.approx(3.0 - 0.1 * i, rel=0.1)
    static = [sup.result_for("looming", sup.frame(f, 600.0 + 0.1 * i))
              for i, f in enumerate(_looming_frames(4, "static"))]
    assert not any(m.ttc_valid for m in static)
    assert {m.ttc_reason for m in static} <= {"filling", "not_approaching", "low_texture", "poor_fit"}
    # a 2 s gap in the stream: the history restarts, no TTC until it spans 0.1 s again
    after = [sup.result_for("looming", sup.frame(f, 602.4 + 0.1 * i)) for i, f in enumerate(frames[:3])]
    assert [m.frames_in_history for m in after] == [1, 2, 3] and not after[0].ttc_valid
    assert after[0].ttc_reason == "filling"
    # Paused and resumed, no frame since: diagnostics show no tau / ttc_s of the frame before the pause (its
    # tau kept the warn_tau WARN until a frame came).
    assert sup.transition("deactivate") and sup.transition("activate")
    since = len(diags)

    def resumed() -> dict[str, str] | None:
        for array in diags[since:]:
            for status in array.status:
                if status.name.endswith(": looming") and "no input" in status.message:
                    return {kv.key: kv.value for kv in status.values}
        return None

    values = sup.wait_for("diagnostics of the resumed node", resumed)
    assert "tau" not in values and "ttc_s" not in values, values


def test_looming_bag_replayed_equals_offline(ros_env, tmp_path: Path, capsys) -> None:
    """A bag made from the frames, replayed by ``replay`` (its own process) into the node (its own process):
    every Looming message equals the node's detector run offline on the bag's frames and stamps, and what
    ``libredgetpu-ros robotics looming --bag`` prints for the same bag."""
    import json

    import cv2
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.cli.main import main
    from rosbags.highlevel import AnyReader

    from libredgetpu_ros_interfaces.msg import Looming

    files = []
    for i, frame in enumerate(_looming_frames(6)):
        path = tmp_path / f"frame{i}.png"
        cv2.imwrite(str(path), frame)
        files.append(path)
    bag = tmp_path / "approach_bag"
    make_bag(files, bag, MakeBagOptions(topic="/cam/image_raw", rate=5.0, start_ns=1_700_000_000_000_000_000),
             progress=False)
    params = {"template": "looming_64x64_3x3", "ttc_window": 4}
    _spawn(ros_env, "looming_node", _params(tmp_path, "looming", **params), "looming", namespace="cam")
    sup = Supervisor(ros_env, "cam/looming", {"/cam/looming": Looming})
    assert sup.transition("configure") and sup.transition("activate")
    replay = ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "replay", str(bag), "--rate",
                            "0.5", "--wait-subscribers", "1", "--wait-timeout", str(WAIT_S), "--start-delay",
                            "1"], "replay")
    live = sup.wait_for("6 Looming messages", lambda: len(sup.received["/cam/looming"]) >= len(files) and
                        sup.received["/cam/looming"])
    assert replay.wait(timeout=WAIT_S) == 0
    frames, stamps, keys = [], [], []
    with AnyReader([bag]) as reader:
        for conn, _, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            frames.append(np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width, 3))
            stamps.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)  # as the node reads it
            keys.append((msg.header.stamp.sec, msg.header.stamp.nanosec))
    offline = _offline(params, frames, stamps)
    by_stamp = {(m.header.stamp.sec, m.header.stamp.nanosec): m for m in live}
    assert sorted(by_stamp) == sorted(keys)
    for key, want in zip(keys, offline, strict=True):
        _same(by_stamp[key], want)
    assert any(m.ttc_valid for m in live)
    capsys.readouterr()
    assert main(["robotics", "looming", "--model", "looming_64x64_3x3", "--backend", "cpu", "--ttc-window",
                 "4", "--bag", str(bag), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["results"]
    assert [entry["stamp"] for entry in cli] == stamps
    for key, entry in zip(keys, cli, strict=True):
        msg = by_stamp[key]
        zones = np.array(entry["zones"], np.float32).ravel()
        np.testing.assert_array_equal(np.array(msg.zones, np.float32), zones)
        assert msg.tau == pytest.approx(entry["tau"], rel=1e-6)
        assert msg.ttc_valid == (entry["ttc_s"] is not None) and msg.ttc_reason == entry["ttc_reason"]
        if msg.ttc_valid:
            assert msg.ttc == pytest.approx(entry["ttc_s"], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("zones", [-3, float("nan")])
def test_looming_node_refuses_a_sidecar_with_bad_zones(ros_env, tmp_path: Path, zones: float) -> None:
    """Issue 30 item 5: a looming template whose sidecar says ``zones: -3`` configured ((-3)^2 = 9 passed the
    shape check) and failed on the first frame; NaN raised ValueError inside configure. Now configure fails
    with the field named, the node stays up and unconfigured, and configures with a good template."""
    import json
    import shutil

    from libredgetpu_ros.robotics.template import template_files

    _, twin, sidecar = template_files("looming_64x64_3x3")
    bad = tmp_path / "bad"  # not the node's working folder, where a bare template name is looked up first
    bad.mkdir()
    shutil.copy(twin, bad / twin.name)
    (bad / sidecar.name).write_text(json.dumps({**json.loads(sidecar.read_text()), "zones": zones}))
    proc = _spawn(ros_env, "looming_node", _params(tmp_path, "looming", template=str(bad / twin.name)),
                  "looming")
    sup = Supervisor(ros_env, "looming", {})
    assert not sup.transition("configure") and sup.state() == "unconfigured"
    sup.spin_for(0.5)
    assert "field 'zones' is" in (ros_env.work_dir / "looming.log").read_text()
    assert sup.set_param("template", "looming_64x64_3x3").successful
    assert sup.transition("configure") and sup.transition("activate") and proc.poll() is None
