"""Faults in the perception node's camera path, across processes over real (localhost-only) DDS.

The node runs in its own process (``_perception_faulty_node.py``: the real node's ``main()`` with
``RuntimeError`` injected for frames of two poison widths, one in frame processing, one in the frame intake
outside it), a CPU classifier; the test process plays camera and supervisor.

- A bad frame (raw data shorter than its header says) is counted as bad input and the node stays ``active``.
- An unexpected exception in the camera path takes the node through ``on_error`` to ``unconfigured``: logged
  with its traceback, one ERROR diagnostics status naming the cause; ``configure`` + ``activate`` bring it
  back (the camera thread survives). Before the fix, one in processing was counted as a per-frame
  "processing error" while the node stayed ``active``, and one outside processing ended the camera thread
  for good (the node stayed ``active``, no result ever again).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .._helpers import load_helper

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

HERE = Path(__file__).resolve().parent
FAULTY = HERE / "_perception_faulty_node.py"
supervision = load_helper(HERE / "_lifecycle_supervisor.py")
NS = "/pfault"
NODE = f"{NS}/perception"
MODEL = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
WAIT_S = 20.0  # bound on any single wait (discovery of a new process can take a few seconds)


class Supervisor(supervision.LifecycleSupervisor):
    """Camera publisher, lifecycle client, classification and /diagnostics listener in the test process."""

    def __init__(self, ros_env: Any) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from libredgetpu_ros.ros.perception_node import RESULT_QOS
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import Image
        from vision_msgs.msg import Classification

        super().__init__(ros_env, "test_supervisor", NODE, WAIT_S)
        self.results: list[Any] = []
        self.statuses: list[Any] = []  # the node's perception statuses, in arrival order
        self.node.create_subscription(Classification, f"{NS}/classification", self.results.append, RESULT_QOS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self.camera = self.node.create_publisher(Image, f"{NS}/image_raw", qos_profile_sensor_data)
        self._stamp = 0

    def _on_diag(self, msg: Any) -> None:
        self.statuses += [st for st in msg.status if st.name.endswith(": perception")]

    def frame(self, width: int, height: int = 48, data: bytes | None = None) -> Any:
        """A stamped rgb8 frame (unique stamp, so results can be matched to it)."""
        from sensor_msgs.msg import Image

        self._stamp += 1
        rgb = np.full((height, width, 3), 90, np.uint8)
        msg = Image(height=height, width=width, encoding="rgb8", step=width * 3,
                    data=rgb.tobytes() if data is None else data)
        msg.header.stamp.sec = 1000 + self._stamp
        return msg

    def classified(self, frame: Any) -> None:
        """Publish ``frame`` until its classification arrives."""
        sec = frame.header.stamp.sec
        self.wait_for(f"the classification of frame {sec}",
                      lambda: any(r.header.stamp.sec == sec for r in self.results),
                      every=lambda: self.camera.publish(frame))

    def activate(self) -> None:
        assert self.transition("configure"), "configure failed (see the node's log)"
        assert self.transition("activate")
        self.wait_for("the camera subscription", lambda: self.camera.get_subscription_count() > 0)


def _values(status: Any) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def test_a_crash_in_the_camera_path_goes_through_on_error_and_is_recoverable(ros_env, fixture_path,
                                                                             tmp_path: Path) -> None:
    import yaml

    params = tmp_path / "perception_faulty.yaml"
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "model": str(fixture_path(MODEL)), "backend": "cpu", "score_threshold": 0.0,
        "diagnostics_period": 0.2}}}))
    proc = ros_env.spawn([sys.executable, str(FAULTY), "--ros-args", "-r", f"__ns:={NS}",
                          "--params-file", str(params)], "perception_faulty")
    sup = Supervisor(ros_env)
    sup.activate()
    sup.classified(sup.frame(64))

    # Bad input is the frame's fault, not the node's: counted, the node stays active.
    short = sup.frame(64, data=bytes(10))
    sup.wait_for("the short frame counted as bad input",
                 lambda: sup.statuses and int(_values(sup.statuses[-1]).get("bad_input", 0)) >= 1,
                 every=lambda: sup.camera.publish(short))
    assert sup.state() == "active"
    assert _values(sup.statuses[-1])["errors"] == "0"

    faulty = load_helper(FAULTY)
    for width, injected in ((faulty.POISON_WIDTH, "injected fault in the camera path"),
                            (faulty.INTAKE_POISON_WIDTH, "injected fault in the frame intake")):
        # An unexpected exception: error processing, then unconfigured.
        poison = sup.frame(width)
        sup.camera.publish(poison)
        deadline = time.monotonic() + WAIT_S
        while (state := sup.state()) != "unconfigured":
            assert time.monotonic() < deadline, f"the node stayed {state!r} after the fault ({injected})"
            sup.camera.publish(poison)  # best effort: the first one may be lost
            sup.executor.spin_once(timeout_sec=0.2)
        assert proc.poll() is None
        sup.wait_for(f"an ERROR diagnostics status naming the cause ({injected})",
                     lambda injected=injected: any(s.level == b"\x02" and injected in s.message
                                                   for s in sup.statuses))
        errors = [s for s in sup.statuses if s.level == b"\x02" and injected in s.message]
        assert len(errors) == 1, [s.message for s in errors]  # one report per fault
        assert "camera path crashed" in errors[0].message and "RuntimeError" in errors[0].message
        assert _values(errors[0])["errors"] == "1"
        log = (ros_env.work_dir / "perception_faulty.log").read_text()
        assert injected in log and "Traceback" in log and "error processing (from active)" in log, log[-3000:]

        # Recoverable: the camera thread still runs; a good frame is classified again.
        sup.activate()
        sup.classified(sup.frame(64))
        assert sup.state() == "active"
        # configure made a new /diagnostics publisher: wait until its statuses reach us (matched), so the
        # next fault's one ERROR status, published just before on_error destroys it, is not lost.
        seen = len(sup.statuses)
        sup.wait_for("a status from the new configuration", lambda seen=seen: len(sup.statuses) > seen)


def test_a_failing_release_is_logged_and_the_transition_goes_on() -> None:
    """``close_processor`` (cleanup / shutdown / on_error) must not raise: a device that fails to close
    is a warning naming what was closed."""
    from libredgetpu_ros.errors import DeviceError
    from libredgetpu_ros.ros.camera.node_base import CameraNode

    warnings: list[str] = []

    class Node:
        def get_logger(self) -> Any:
            return type("Logger", (), {"warning": staticmethod(warnings.append)})()

    class Unplugged:
        def close(self) -> None:
            raise DeviceError("the USB device went away")

    CameraNode.close_logged(Node(), Unplugged(), "the pipeline")  # type: ignore[arg-type]
    CameraNode.close_logged(Node(), None, "nothing")  # type: ignore[arg-type]
    assert len(warnings) == 1 and warnings[0].startswith("closing the pipeline: ")
    assert "the USB device went away" in warnings[0]
