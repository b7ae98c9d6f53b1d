"""The recognition node as its own process over real (localhost-only) DDS, driven from outside: this process
is camera and supervisor (lifecycle, enroll / forget / save / load); a bag of the fixture photos replayed by
``replay`` gives the labels and scores of the node's extractor and database run offline on the same frames."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

supervision = load_helper(Path(__file__).resolve().parents[1] / "ros" / "_lifecycle_supervisor.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(240)]

WAIT_S = 40.0
PHOTOS = ("cat_train_0", "dog_train_0", "hotdog_train_0", "hotdog_train_1")


class Camera(supervision.LifecycleSupervisor):
    def __init__(self, ros_env: Any, node: str) -> None:
        from libredgetpu_ros.ros.camera import RESULT_QOS
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image
        from vision_msgs.msg import Classification

        super().__init__(ros_env, "test_recognition_camera", f"/{node}", WAIT_S)
        self.camera = self.node.create_publisher(Image, "/camera", qos_profile_sensor_data)
        self.results: list[Any] = []
        self.node.create_subscription(Classification, "/classification", self.results.append, RESULT_QOS)
        self._stamp = 0

    def frame(self, rgb: np.ndarray | None = None, data: bytes | None = None, encoding: str = "rgb8") -> Any:
        from sensor_msgs.msg import Image

        self._stamp += 1
        h, w = (rgb.shape[:2] if rgb is not None else (10, 10))
        msg = Image(height=h, width=w, encoding=encoding, step=w * 3,
                    data=rgb.tobytes() if data is None else data)
        msg.header.frame_id = "camera"
        msg.header.stamp.sec, msg.header.stamp.nanosec = 100 + self._stamp, 0
        return msg

    def classify(self, rgb: np.ndarray) -> Any:
        """Publish a frame (again each second: best effort) until its Classification arrives."""
        msg = self.frame(rgb)
        stamp = msg.header.stamp.sec
        return self.wait_for(f"classification of stamp {stamp}",
                             lambda: next((r for r in self.results if r.header.stamp.sec == stamp), None),
                             every=lambda: self.camera.publish(msg))


def _params(tmp: Path, **params: Any) -> Path:
    import yaml

    path = tmp / "recognition.yaml"
    base = {"backend": "cpu", "template": 256, "top_k": 2, "diagnostics_period": 0.3}
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": {**base, **params}}}))
    return path


def _spawn(ros_env: Any, params: Path) -> None:
    ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.ros.recognition.node", "--ros-args", "-r",
                   "__node:=recognition", "-r", "image_raw:=/camera", "-r", "classification:=/classification",
                   "--params-file", str(params)], "recognition")


@pytest.fixture(scope="module")
def photos():
    from libredgetpu_ros.fixtures import fixtures_dir
    from libredgetpu_ros.perception.images import load_image

    return {n: load_image(fixtures_dir() / "robotics" / "embedding" / f"{n}.bmp") for n in PHOTOS}


def test_enroll_recognise_forget_save_load_and_bad_input(ros_env, tmp_path: Path, photos) -> None:
    from libredgetpu_ros_interfaces.srv import Enroll, FilePath, Forget

    _spawn(ros_env, _params(tmp_path))
    cam = Camera(ros_env, "recognition")
    assert cam.transition("configure") and cam.transition("activate") and cam.state() == "active"
    none_yet = cam.service(Enroll, "enroll", label="cat")
    assert not none_yet.success and "no camera frame" in none_yet.message
    assert cam.classify(photos["cat_train_0"]).results == []  # empty database: empty Classification
    cat = cam.service(Enroll, "enroll", label="cat")
    assert cat.success and cat.entries == 1  # the last frame (the cat) is enrolled
    for name in ("dog_train_0", "hotdog_train_0"):
        cam.classify(photos[name])
        assert cam.service(Enroll, "enroll", label=name.split("_")[0]).success
    # The other hot dog photo, flipped: recognised; the second label (top_k 2) is below the open-set
    # threshold and left out.
    result = cam.classify(np.ascontiguousarray(photos["hotdog_train_1"][:, ::-1]))
    assert [r.class_id for r in result.results] == ["hotdog"] and result.results[0].score > 0.6
    # A photo of nothing enrolled: "unknown" (scored with the best cosine that fell short), not a class.
    from libredgetpu_ros.fixtures import fixtures_dir
    from libredgetpu_ros.perception.images import load_image

    person = cam.classify(load_image(fixtures_dir() / "images" / "grace_hopper.bmp"))
    assert [r.class_id for r in person.results] == ["unknown"] and 0.3 < person.results[0].score < 0.6
    # Hostile labels refused, the database kept (a NUL never reaches the node: rcl cuts the string there).
    for label in ("a\nb", "bell\x07", "\x1b[2J", "rtl\u202eoverride", "x" * 100_000, "unknown", " cat"):
        refused = cam.service(Enroll, "enroll", label=label)
        assert not refused.success and "label" in refused.message and len(refused.message) < 300
    # A region of the last frame; a region outside it is refused.
    region = cam.service(Enroll, "enroll", label="hotdog", use_region=True, x=50, y=40, width=200, height=200)
    assert region.success and region.entries == 4
    outside = cam.service(Enroll, "enroll", label="x", use_region=True, x=400, y=0, width=400, height=10)
    assert not outside.success and "region" in outside.message
    # Bad frames (undecodable size) are counted, the node runs on.
    cam.camera.publish(cam.frame(data=b"\x00" * 7))
    saved = tmp_path / "db.npz"
    assert cam.service(FilePath, "save", path=str(saved)).success
    forgot = cam.service(Forget, "forget", label="hotdog")
    assert forgot.success and forgot.removed == 2
    assert not cam.service(Forget, "forget", label="hotdog").success
    assert [r.class_id for r in cam.classify(photos["hotdog_train_1"]).results] == ["unknown"]
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a database")
    refused = cam.service(FilePath, "load", path=str(bad))
    assert not refused.success and "database unchanged" in refused.message
    other = tmp_path / "other_size.npz"  # a database of 512-d embeddings (another extractor)
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.embedding import EmbeddingSimilarity

    with MatMulEngine.from_template(512, backend="cpu") as engine:
        small = EmbeddingSimilarity(engine, 512)
        small.add("elsewhere", np.ones(512))
        small.save(other)
    refused = cam.service(FilePath, "load", path=str(other))
    assert not refused.success and "holds 512-d embeddings, this database 1024-d" in refused.message
    assert cam.service(FilePath, "load", path=str(saved)).success
    assert cam.classify(photos["hotdog_train_1"]).results[0].class_id == "hotdog"
    assert cam.state() == "active"
    # Paused and resumed (the robot elsewhere by then): ~/enroll waits for a frame of now (it enrolled the
    # last frame before the pause under the label given now).
    assert cam.transition("deactivate") and cam.transition("activate")
    stale = cam.service(Enroll, "enroll", label="kitchen")
    assert not stale.success and "no camera frame" in stale.message, stale.message
    cam.classify(photos["cat_train_0"])
    assert cam.service(Enroll, "enroll", label="cat").success


def test_bag_replayed_equals_offline(ros_env, tmp_path: Path, photos) -> None:
    """The photos as a camera bag replayed into the node == the extractor + database run offline."""
    import cv2
    from libredgetpu_ros.bags.make import MakeBagOptions, make_bag
    from libredgetpu_ros.matmul import MatMulEngine
    from libredgetpu_ros.robotics.embedding import EmbeddingSimilarity
    from libredgetpu_ros.robotics.extractor import EmbeddingExtractor

    files = []
    for name, rgb in photos.items():
        path = tmp_path / f"{name}.png"
        cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        files.append(path)
    bag = tmp_path / "photos_bag"
    make_bag(files, bag, MakeBagOptions(topic="/camera", rate=2.0, start_ns=5_000_000_000), progress=False)
    database = tmp_path / "db.npz"
    with EmbeddingExtractor(backend="cpu") as extractor, MatMulEngine.from_template(256, backend="cpu") as e:
        db = EmbeddingSimilarity(e, extractor.dim)
        db.add("cat", extractor.embed(photos["cat_train_0"]))
        db.add("hotdog", extractor.embed(photos["hotdog_train_0"]))
        db.save(database)
        decisions = [db.classify(extractor.embed(rgb), top_k=2) for rgb in photos.values()]
        expected = [[(m.label, m.score) for m in d.matches] or [("unknown", d.score)] for d in decisions]
    assert [row[0][0] for row in expected] == ["cat", "unknown", "hotdog", "hotdog"]  # the dog: not enrolled

    _spawn(ros_env, _params(tmp_path, database=str(database)))
    cam = Camera(ros_env, "recognition")
    assert cam.transition("configure") and cam.transition("activate")
    replay = ros_env.spawn([sys.executable, "-m", "libredgetpu_ros.cli.main", "replay", str(bag), "--rate",
                            "0.5", "--wait-subscribers", "1", "--wait-timeout", str(WAIT_S), "--start-delay",
                            "1"], "replay")
    got = cam.wait_for("4 classifications", lambda: len(cam.results) >= 4 and cam.results)
    assert replay.wait(timeout=WAIT_S) == 0
    live = [[(r.class_id, r.score) for r in msg.results] for msg in got[:4]]
    assert [m.header.stamp.sec for m in got[:4]] == [5, 5, 6, 6]
    assert live == expected
    _process_bag_equals_live(tmp_path, bag, database, got[:4])


def _process_bag_equals_live(tmp: Path, bag: Path, database: Path, live: list[Any]) -> None:
    """``process-bag --node-type recognition`` with the node's parameters file writes, on the node's
    (remapped) topic, the Classification messages the live node published: same header, labels and scores
    (floats within 1e-6), at the input's bag timestamps. The bag's one image topic (``/camera``) stands in
    for the node's ``image_raw``, as the node's remap did."""
    import math

    from libredgetpu_ros.cli.main import main
    from rosbags.highlevel import AnyReader

    assert main(["process-bag", str(bag), str(tmp / "results_bag"), "--config",
                 str(_params(tmp, database=str(database))), "--node-type", "recognition"]) == 0
    with AnyReader([tmp / "results_bag"]) as reader:
        offline = [(c.topic, t, reader.deserialize(raw, c.msgtype)) for c, t, raw in reader.messages()]
    assert [topic for topic, _, _ in offline] == ["/classification"] * len(live)
    for (_, timestamp, off), msg in zip(offline, live, strict=True):
        stamp = (msg.header.stamp.sec, msg.header.stamp.nanosec)
        assert (off.header.stamp.sec, off.header.stamp.nanosec, off.header.frame_id) == \
            (*stamp, msg.header.frame_id)
        assert timestamp == stamp[0] * 10**9 + stamp[1]
        assert [r.class_id for r in off.results] == [r.class_id for r in msg.results]
        assert all(math.isclose(a.score, b.score, abs_tol=1e-6) for a, b in zip(off.results, msg.results,
                                                                                   strict=True))
