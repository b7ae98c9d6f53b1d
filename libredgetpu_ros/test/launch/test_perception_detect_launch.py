"""launch_testing: object detection out of the box (run by `make test` through launch_test).

A machine without an accelerator after ``libredgetpu-ros models import`` of the fixtures (done here into a
private model cache, ``LIBREDGETPU_ROS_MODELS``), then ``perception.launch.py task:=detect``: with no
``params_file:=`` the launch takes the shipped ``config/perception_detect.yaml`` (catalogue model
``ssd_mobilenet_v2_coco``, backend auto -> the CPU twin), the node reaches ``active``, and a photo of a cat
published on the remapped camera topic comes back as a ``vision_msgs/Detection2DArray`` whose best detection
is class 16 ("cat") over the cat; LabelInfo (latched), markers and the annotated image are published too;
with the camera's CameraInfo beside the image, the box marker lies on its image plane. The broken launch
adds ``require_accelerator:=true``: configure must fail saying the model would run on the CPU, and the node
stays ``unconfigured``.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_test loads this file by path

from _harness import LaunchCase, camera, launch_tests

CAT = 16  # COCO class id of "cat" (labels/coco_labels_edgetpu_2019.txt)


def _cache() -> str:
    from libredgetpu_ros.fixtures import fixtures_dir
    from libredgetpu_ros.models.store import import_dir

    folder = Path(tempfile.mkdtemp(prefix="libredgetpu_ros_detect_cache_"))
    names = import_dir(fixtures_dir(), ["ssd_mobilenet_v2_coco"], cache=folder)
    assert names == ["ssd_mobilenet_v2_coco"], names
    return str(folder)


# The camera's intrinsics (published beside the image): the markers must lie on its image plane.
FX, FY, CX, CY, W, H = 400.0, 410.0, 250.0, 175.0, 512, 341


def _camera(node: Any) -> Callable[[], None]:
    from libredgetpu_ros.fixtures import fixture
    from libredgetpu_ros.perception.images import load_image
    from sensor_msgs.msg import CameraInfo

    info = CameraInfo(width=W, height=H, k=[FX, 0.0, CX, 0.0, FY, CY, 0.0, 0.0, 1.0])
    info.header.frame_id = "camera"
    return camera(node, load_image(fixture("images/cat.bmp")), info=info)


def _box_on_image_plane(msg: Any) -> bool:
    """The cat's box marker, projected through the camera's pinhole, lands on the cat's box in pixels
    (LiteRT: x 42..379, y 37..333), at the config's marker_depth (1 m)."""
    boxes = [m for m in msg.markers if m.ns == "boxes" and m.id == 0 and m.points]
    if not boxes or boxes[0].points[0].z <= 0:
        return False  # before the CameraInfo got in: z = 0 plane
    uv = [(FX * p.x / p.z + CX, FY * p.y / p.z + CY) for p in boxes[0].points]
    us, vs = [u for u, _ in uv], [v for _, v in uv]
    return (all(abs(p.z - 1.0) < 1e-9 for p in boxes[0].points) and abs(min(us) - 42) < 3
            and abs(max(us) - 379) < 3 and abs(min(vs) - 37) < 3 and abs(max(vs) - 333) < 3)


def _cat_detected(msg: Any) -> None:
    assert msg.header.frame_id == "camera", msg.header
    assert msg.detections, "no detection of the cat photo"
    best = max(msg.detections, key=lambda d: d.results[0].hypothesis.score)
    hypothesis = best.results[0].hypothesis
    assert hypothesis.class_id == str(CAT) and hypothesis.score > 0.9, hypothesis
    # the cat fills most of the 512 x 341 photo (LiteRT: x 42..379, y 37..333)
    centre, box = best.bbox.center.position, best.bbox
    assert abs(centre.x - 210) < 10 and abs(centre.y - 185) < 10 and box.size_x > 300, box


def _case() -> LaunchCase:
    from sensor_msgs.msg import Image
    from vision_msgs.msg import Detection2DArray, LabelInfo
    from visualization_msgs.msg import MarkerArray

    return LaunchCase(
        launch_file="perception.launch.py",
        node="/lt/perception",
        arguments={"namespace": "lt", "image": "/lt/camera", "task": "detect"},
        params_key="",  # no params_file:= -- task:=detect picks config/perception_detect.yaml
        params={},
        expect_params={"model": "ssd_mobilenet_v2_coco", "labels": "ssd_mobilenet_v2_coco", "task": "detect",
                       "backend": "auto"},
        broken={},
        failure_log="require_accelerator is true but the model would run on the CPU",
        result=(Detection2DArray, "/lt/detections"),
        stimulus=_camera,
        environment={"LIBREDGETPU_ROS_MODELS": _cache()},
        broken_arguments={"require_accelerator": "true"},
        check=_cat_detected,
        # the rest of what the shipped config publishes: the label map (once, latched), boxes as markers and
        # the annotated frame
        also=((LabelInfo, "/lt/label_info", True, None),
              (MarkerArray, "/lt/markers", False, _box_on_image_plane),
              (Image, "/lt/annotated", False, None)),
    )


generate_test_description, TestLaunchedNode, TestShutdown = launch_tests(_case())
