"""``compare-bags`` (issue 35): two process-bags runs of the same corpus compare equal (exit 0); a run with
a changed score threshold is reported changed (exit 1) with exactly the differences the baseline's
results imply; the HTML report parses, holds its three plots and crops of the input frames, and loads
nothing from the network; bad input is exit 2. Per type differences (detections by IoU, poses by OKS,
label masks, any other message field by field) on messages built with the typestore."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.cli import main as cli
from libredgetpu_ros.compare.messages import Tolerances, diff_messages

from .test_process_bags import bag_messages, config, make_corpus

pytestmark = pytest.mark.ros  # process-bags runs the nodes' processing and rclpy's serializers


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, fixture_path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    inputs = make_corpus(root / "in", fixture_path)
    out = {}
    for name, threshold, jobs in (("base", 0.0, 1), ("same", 0.0, 2), ("raised", 0.1, 2)):
        out[name] = root / name
        assert cli.main(["process-bags", "--config", str(config(root, fixture_path, threshold)), "-o",
                         str(out[name]), "--jobs", str(jobs), "--no-progress", *map(str, inputs)]) == 1
    return out


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = cli.main(["compare-bags", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_identical_runs_compare_equal(runs, capsys) -> None:
    code, doc = _compare(capsys, str(runs["base"]), str(runs["same"]))
    assert code == 0 and doc["verdict"] == "same"
    assert doc["totals"]["bags"] == 6 and doc["totals"]["compared_messages"] == 13
    assert doc["totals"]["exceeding"] == 0 and doc["listed"] == []
    # one bag against itself, as single result bags
    code, doc = _compare(capsys, str(runs["base"] / "r1" / "c"), str(runs["same"] / "r1" / "c"))
    assert code == 0 and doc["totals"]["compared_messages"] == 3


def test_a_raised_threshold_is_reported_with_its_differences(runs, capsys, tmp_path: Path) -> None:
    expected: dict[str, int] = {}
    for bag in sorted(runs["base"].rglob("metadata.yaml")):
        for _topic, _type, _ts, msg in bag_messages(bag.parent):
            scores = [r["score"] for r in msg["results"]]
            expected["class_lost"] = expected.get("class_lost", 0) + sum(s < 0.1 for s in scores)
            expected["top1_changed"] = expected.get("top1_changed", 0) + (max(scores) < 0.1)
    expected = {k: n for k, n in expected.items() if n}
    assert expected.get("class_lost"), "the threshold removes no class: the test shows nothing"
    report = tmp_path / "report.html"
    code = cli.main(["compare-bags", str(runs["base"]), str(runs["raised"]), "--json", "--report",
                     str(report)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and doc["verdict"] == "changed"
    assert doc["totals"]["exceeding_by_kind"] == expected
    assert {d["kind"] for d in doc["listed"]} == set(expected)
    assert all(d["topic"] == "/classification" for d in doc["listed"])
    assert all(d["value"] < 0.1 for d in doc["listed"] if d["kind"] == "class_lost")
    # text output: the same verdict, exit 1
    assert cli.main(["compare-bags", str(runs["base"]), str(runs["raised"])]) == 1
    assert "changed:" in capsys.readouterr().out
    _check_report(report)


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _check_report(path: Path) -> None:
    import cv2

    text = path.read_text()
    parser = _Elements()
    parser.feed(text)
    parser.close()
    tags = parser.tags
    divs = {a.get("id") for t, a in tags if t == "div" and a.get("class") == "plot"}
    assert divs == {"counts", "score-deltas", "timeline"}
    assert sum(t == "svg" for t, _ in tags) == 3
    assert not [t for t, _ in tags if t in ("script", "link", "iframe")]
    images = [a["src"] for t, a in tags if t == "img"]
    assert images, "no crops of the worst differences"
    for src in images:
        assert src.startswith("data:image/png;base64,")
        rgb = cv2.imdecode(np.frombuffer(base64.b64decode(src.split(",", 1)[1]), np.uint8), cv2.IMREAD_COLOR)
        assert rgb is not None and rgb.shape[0] > 8 and rgb.shape[1] > 8
    assert all(not (a.get("src") or a.get("href") or "").startswith(("http:", "https:", "//"))
               for _t, a in tags)


def test_bad_input_is_exit_2(runs, tmp_path: Path, capsys) -> None:
    assert cli.main(["compare-bags", str(runs["base"]), str(tmp_path / "missing")]) == 2
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metadata.yaml").write_text("not: [a bag")
    assert cli.main(["compare-bags", str(broken), str(runs["base"] / "a")]) == 2
    for option, value in (("--score-tol", "-1"), ("--iou-match", "1.5")):
        with pytest.raises(SystemExit) as exc:  # argparse refuses a bad tolerance: exit 2
            cli.main(["compare-bags", str(runs["base"]), str(runs["same"]), option, value])
        assert exc.value.code == 2


def _types():
    from libredgetpu_ros.bags.typestore import typestore

    return typestore().types


def _detections(*boxes: tuple[float, float, float, float, str, float]):
    t = _types()
    header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=1, nanosec=0), frame_id="c")
    dets = []
    for cx, cy, w, h, cls, score in boxes:
        pose = t["geometry_msgs/msg/PoseWithCovariance"](
            pose=t["geometry_msgs/msg/Pose"](position=t["geometry_msgs/msg/Point"](x=0.0, y=0.0, z=0.0),
                                             orientation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0,
                                                                                           z=0.0, w=1.0)),
            covariance=np.zeros(36))
        hyp = t["vision_msgs/msg/ObjectHypothesisWithPose"](
            hypothesis=t["vision_msgs/msg/ObjectHypothesis"](class_id=cls, score=score), pose=pose)
        center = t["vision_msgs/msg/Pose2D"](position=t["vision_msgs/msg/Point2D"](x=cx, y=cy), theta=0.0)
        bbox = t["vision_msgs/msg/BoundingBox2D"](center=center, size_x=w, size_y=h)
        dets.append(t["vision_msgs/msg/Detection2D"](header=header, results=[hyp], bbox=bbox, id=""))
    return t["vision_msgs/msg/Detection2DArray"](header=header, detections=dets)


def test_detections_matched_by_iou() -> None:
    base = _detections((50, 50, 20, 20, "person", 0.9), (150, 50, 20, 20, "dog", 0.8),
                       (300, 300, 10, 10, "cat", 0.6))
    cand = _detections((151, 50, 20, 20, "cat", 0.8), (50, 50, 20, 20, "person", 0.7),
                       (10, 300, 10, 10, "car", 0.5))
    out = diff_messages("vision_msgs/msg/Detection2DArray", base, cand, Tolerances())
    kinds = sorted((d.kind, d.detail) for d in out.differences)
    assert kinds == [("class_changed", "dog -> cat"), ("detection_added", "car (0.500)"),
                     ("detection_lost", "cat (0.600)"), ("score_delta", "person: 0.900 -> 0.700")]
    assert sorted(round(x, 6) for x in out.score_deltas) == [-0.2, 0.0]
    same = diff_messages("vision_msgs/msg/Detection2DArray", base, base, Tolerances())
    assert same.differences == []


def test_masks_fields_and_poses() -> None:
    t = _types()
    header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=1, nanosec=0), frame_id="c")
    labels = np.zeros((10, 20), np.uint8)
    labels[2:6, 3:9] = 15
    changed = labels.copy()
    changed[2:4, 3:9] = 0  # 12 of 200 pixels change label

    def image(a: np.ndarray):
        return t["sensor_msgs/msg/Image"](header=header, height=10, width=20, encoding="mono8",
                                          is_bigendian=0, step=20, data=a.reshape(-1))

    out = diff_messages("sensor_msgs/msg/Image", image(labels), image(changed), Tolerances())
    (d,) = out.differences
    assert (d.kind, d.value, d.exceeds, d.box) == ("mask_agreement", 0.94, True, (3.0, 2.0, 9.0, 4.0))
    assert "15: 0.500" in d.detail
    looming = "libredgetpu_ros_interfaces/msg/Looming"
    a = t[looming](header=header, zones_per_side=3, zones=np.ones(9, np.float32), tau=1.5, ttc_valid=True,
                   ttc=2.0, ttc_reason="ok", frames_in_history=5)
    b = t[looming](header=header, zones_per_side=3, zones=np.ones(9, np.float32), tau=1.25, ttc_valid=False,
                   ttc=2.0, ttc_reason="not_approaching", frames_in_history=5)
    out = diff_messages(looming, a, b, Tolerances())
    assert sorted((d.kind, d.detail) for d in out.differences) == [
        ("field_changed", "ttc_reason: 'ok' -> 'not_approaching'"),
        ("field_changed", "ttc_valid: True -> False"),
        ("field_delta", "tau: 1.5 -> 1.25")]
    kp = t["libredgetpu_ros_interfaces/msg/Keypoint"]
    person = t["libredgetpu_ros_interfaces/msg/PersonPose"]
    poses = t["libredgetpu_ros_interfaces/msg/PersonPoseArray"]
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 100, (17, 2))

    def people(shift: float):
        return poses(header=header, poses=[person(keypoints=[kp(name="", id=i, x=float(x + shift * (i == 0)),
                                                                y=float(y), score=0.9)
                                                             for i, (x, y) in enumerate(xy)], score=0.8)])

    out = diff_messages("libredgetpu_ros_interfaces/msg/PersonPoseArray", people(0), people(5), Tolerances())
    assert [(d.kind, round(d.value, 3)) for d in out.differences] == [("keypoint_distance", 5.0)]
    empty = poses(header=header, poses=[])
    out = diff_messages("libredgetpu_ros_interfaces/msg/PersonPoseArray", people(0), empty, Tolerances())
    assert [d.kind for d in out.differences] == ["pose_lost"]


def test_detections_end_to_end_a_raised_threshold_loses_exactly_the_low_scores(tmp_path: Path, fixture_path,
                                                                               capsys) -> None:
    """SSD MobileNet v2 (CPU twin) on the fixture photos at score thresholds 0.3 and 0.85: compare-bags
    lists as lost exactly the baseline's detections scoring under 0.85, matches every other one with no
    score change, and the report crops the lost boxes from the input frames."""
    import yaml
    from libredgetpu_ros.compare.report import worst

    bag = tmp_path / "photos"
    assert cli.main(["make-bag", "--images", str(fixture_path("images/grace_hopper.bmp")),
                     str(fixture_path("images/test_couple.jpg")), "--out", str(bag), "--rate", "10",
                     "--start", "100", "--no-progress"]) == 0
    runs = {}
    for threshold in (0.3, 0.85):
        cfg = tmp_path / f"detect_{threshold}.yaml"
        cfg.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
            "model": str(fixture_path("ssd/mobilenet_ssd_v2_coco_quant_postprocess_edgetpu.tflite")),
            "labels": str(fixture_path("labels/coco_labels_edgetpu_2019.txt")), "backend": "cpu",
            "task": "detect", "score_threshold": threshold}}}))
        runs[threshold] = tmp_path / f"run_{threshold}"
        assert cli.main(["process-bags", "--config", str(cfg), "-o", str(runs[threshold]), "--jobs", "1",
                         "--no-progress", str(bag)]) == 0
    capsys.readouterr()
    scores = [h["hypothesis"]["score"] for _t, msgtype, _ts, msg in bag_messages(runs[0.3] / "photos")
              if msgtype == "vision_msgs/msg/Detection2DArray"
              for d in msg["detections"] for h in d["results"]]
    low = sum(s < 0.85 for s in scores)
    assert low and len(scores) > low, scores
    report = tmp_path / "detections.html"
    code, doc = _compare(capsys, str(runs[0.3]), str(runs[0.85]), "--report", str(report))
    # the latched label map carries the threshold: that change is listed too
    assert code == 1 and doc["totals"]["exceeding_by_kind"] == {"detection_lost": low, "field_delta": 1}
    (label_map,) = [d for d in doc["listed"] if d["kind"] == "field_delta"]
    assert (label_map["topic"], label_map["detail"]) == ("/label_info", "threshold: 0.3 -> 0.85")
    lost = [d for d in doc["listed"] if d["kind"] == "detection_lost"]
    assert all(d["topic"] == "/detections" and d["box"] for d in lost)
    _check_report(report)
    from libredgetpu_ros.compare.runs import compare_runs

    comparison = compare_runs(runs[0.3], runs[0.85])
    assert comparison.bags[0].score_deltas == [0.0] * (len(scores) - low)
    assert len(worst(comparison.exceeding(), 12)) == low + 1


def test_a_malformed_mask_is_bad_input(tmp_path: Path, capsys) -> None:
    """A label image whose data is shorter than height x step (a damaged or foreign results bag): exit 2
    naming the bag, topic and time, not a traceback."""
    from libredgetpu_ros.bags.storage import new_bag
    from libredgetpu_ros.bags.typestore import typestore

    store = typestore()
    t = store.types
    header = t["std_msgs/msg/Header"](stamp=t["builtin_interfaces/msg/Time"](sec=1, nanosec=0), frame_id="c")
    for name, rows in (("good", 10), ("short", 5)):
        msg = t["sensor_msgs/msg/Image"](header=header, height=10, width=20, encoding="mono8", is_bigendian=0,
                                         step=20, data=np.zeros(20 * rows, np.uint8))
        with new_bag(tmp_path / name, "mcap") as writer:
            conn = writer.add_connection("/segmentation", "sensor_msgs/msg/Image", typestore=store)
            writer.write(conn, 10**9, bytes(store.serialize_cdr(msg, "sensor_msgs/msg/Image")))
    assert cli.main(["compare-bags", str(tmp_path / "good"), str(tmp_path / "short")]) == 2
    assert "/segmentation at 1000000000 is malformed" in capsys.readouterr().err
