"""Second process of test_interfaces_roundtrip: a peer speaking every kind of message we publish over DDS
(our interfaces, and vision_msgs for detections).

- serves ``set_weights`` (SetWeights): stores the request, answers with :data:`SET_WEIGHTS_REPLY` plus
  an echo of the scalar request fields in ``message``;
- serves ``get_weights`` (GetWeights): returns the stored matrix and bias as received, and per-row
  min/max computed here with NumPy;
- publishes :func:`detections` on ``detections``, :func:`poses` on ``poses`` and :func:`looming` on
  ``looming`` every 50 ms.

The builders are shared with the test (which loads this file by path), so both sides agree on what was
sent; what is under test is everything in between (rosidl C structs, CDR, Fast DDS). It exits by itself
after ``--lifetime`` seconds so a crashed test leaves no orphan.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

# Values chosen to catch truncation: full-width integers, float32-only values, extreme float64.
SET_WEIGHTS_REPLY = {
    "accepted": True,
    "version": 2**64 - 1,
    "clipped_count": 2**32 - 1,
    "max_quantization_error": float(np.float32(1.0 / 3.0)),
    "validate_ms": 1e-300,
    "quantize_ms": 2.5,
    "blob_ms": -0.0,
    "swap_ms": 1e300,
    "total_ms": 3.141592653589793,
}
FRAME_ID = "camera_optical_frame/ü"  # non-ASCII: strings must survive as UTF-8


def echo_message(engine: str, rows: int, cols: int, dry_run: bool) -> str:
    return f"{engine}|{rows}|{cols}|{dry_run}"


def detections(stamp_sec: int = 1_700_000_000, stamp_nanosec: int = 999_999_999):
    """A vision_msgs Detection2DArray with varied nesting: detections with 0, 1 and 3 hypotheses."""
    from vision_msgs.msg import Detection2D, Detection2DArray, ObjectHypothesis, ObjectHypothesisWithPose

    msg = Detection2DArray()
    msg.header.stamp.sec = stamp_sec
    msg.header.stamp.nanosec = stamp_nanosec
    msg.header.frame_id = FRAME_ID
    for i, n_hyp in enumerate((0, 1, 3)):
        det = Detection2D()
        det.header = msg.header
        det.results = [ObjectHypothesisWithPose(
            hypothesis=ObjectHypothesis(class_id=f"class_{i}_{k}", score=1.0 - 0.125 * k))
            for k in range(n_hyp)]
        det.bbox.center.position.x = 320.5 + i
        det.bbox.center.position.y = -1e-9 * (i + 1)
        det.bbox.center.theta = 0.7853981633974483 * i
        det.bbox.size_x = 1e6 / (i + 1)
        det.bbox.size_y = 2.0 ** -1074 if i == 2 else 12.25  # smallest subnormal double
        det.id = "" if i == 0 else f"track-{i}"
        msg.detections.append(det)
    return msg


def poses(stamp_sec: int = 42, stamp_nanosec: int = 7):
    """A PersonPoseArray with two people of 17 COCO keypoints each."""
    from libredgetpu_ros_interfaces.msg import Keypoint, PersonPose, PersonPoseArray

    names = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
             "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
             "right_knee", "left_ankle", "right_ankle"]
    msg = PersonPoseArray()
    msg.header.stamp.sec = stamp_sec
    msg.header.stamp.nanosec = stamp_nanosec
    msg.header.frame_id = FRAME_ID
    for person in range(2):
        pose = PersonPose(score=0.5 + 0.25 * person)
        pose.keypoints = [Keypoint(name=name, id=k, x=10.0 * k + 0.1 * person, y=480.0 - k * 3.3,
                                   score=k / 16.0) for k, name in enumerate(names)]
        msg.poses.append(pose)
    return msg


def looming(stamp_sec: int = 2**31 - 1, stamp_nanosec: int = 1):
    """A Looming message with no TTC and the reason why (a string field beside the numbers)."""
    from libredgetpu_ros_interfaces.msg import Looming

    values = (0.0, -0.0, 1e-45, 3.4e38, 1 / 3, 2.5, 7.0, 8.0, 9.0)
    msg = Looming(zones_per_side=3, zones=[float(np.float32(v)) for v in values],
                  tau=float(np.float32(1.0 / 3.0)), ttc_valid=False, ttc=0.0, ttc_reason="not_approaching/ü",
                  frames_in_history=2**64 - 1)
    msg.header.stamp.sec, msg.header.stamp.nanosec = stamp_sec, stamp_nanosec
    msg.header.frame_id = FRAME_ID
    return msg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lifetime", type=float, default=60.0, help="exit after this many seconds")
    args = parser.parse_args(argv)

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from vision_msgs.msg import Detection2DArray

    from libredgetpu_ros_interfaces.msg import Looming, PersonPoseArray
    from libredgetpu_ros_interfaces.srv import GetWeights, SetWeights

    rclpy.init()
    node = rclpy.create_node("interfaces_peer")
    stored: dict[str, np.ndarray | int] = {}

    def set_weights(request: SetWeights.Request, response: SetWeights.Response) -> SetWeights.Response:
        stored["rows"], stored["cols"] = request.rows, request.cols
        stored["data"] = np.asarray(request.data, dtype=np.float32).copy()
        stored["bias"] = np.asarray(request.bias, dtype=np.float32).copy()
        for key, value in SET_WEIGHTS_REPLY.items():
            setattr(response, key, value)
        response.message = echo_message(request.engine, request.rows, request.cols, request.dry_run)
        return response

    def get_weights(request: GetWeights.Request, response: GetWeights.Response) -> GetWeights.Response:
        if "data" not in stored:
            response.success, response.message = False, "no weights set"
            return response
        matrix = stored["data"].reshape(stored["rows"], stored["cols"])
        response.success, response.message = True, request.engine
        response.version = SET_WEIGHTS_REPLY["version"]
        response.rows, response.cols = stored["rows"], stored["cols"]
        response.data = stored["data"]
        response.bias = stored["bias"]
        response.weight_min = matrix.min(axis=1)
        response.weight_max = matrix.max(axis=1)
        return response

    node.create_service(SetWeights, "set_weights", set_weights)
    node.create_service(GetWeights, "get_weights", get_weights)
    det_pub = node.create_publisher(Detection2DArray, "detections", 10)
    pose_pub = node.create_publisher(PersonPoseArray, "poses", 10)
    looming_pub = node.create_publisher(Looming, "looming", 10)
    det_msg, pose_msg, looming_msg = detections(), poses(), looming()
    node.create_timer(0.05, lambda: (det_pub.publish(det_msg), pose_pub.publish(pose_msg),
                                     looming_pub.publish(looming_msg)))

    executor = SingleThreadedExecutor()
    executor.add_node(node)
    print("interfaces_peer: ready", flush=True)
    deadline = time.monotonic() + args.lifetime
    try:
        while rclpy.ok() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
