"""The test's end of a perception node started by ``bringup`` in another process: a classifier on ``/cam``,
a camera publisher, its classification results and its diagnostics. Used by the cross-process perception
tests (compressed input, hostile input)."""

from __future__ import annotations

import signal
import time

MODEL = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"
LABELS = "labels/imagenet_labels.txt"


def bringup_classifier(ros_env, fixture_path, input_type: str, topic: str, labels: bool = False,
                       transport: str = ""):
    """``bringup`` of a CPU classifier named ``classifier`` in namespace ``cam`` reading ``topic`` (the
    deprecated ``input_type`` when given, else ``transport``)."""
    label_line = f"      labels: {fixture_path(LABELS)}\n" if labels else ""
    type_line = f"      input_type: {input_type}\n" if input_type else f"      transport: {transport}\n"
    return ros_env.spawn_bringup(
        "nodes:\n"
        "  - type: perception\n"
        "    name: classifier\n"
        "    namespace: cam\n"
        "    parameters:\n"
        f"      model: {fixture_path(MODEL)}\n"
        "      backend: cpu\n"
        f"{label_line}"
        f"      input_topic: {topic}\n"
        f"{type_line}"
        "      score_threshold: 0.0\n"
        "      diagnostics_period: 0.2\n")


class Probe:
    """A camera publisher on ``topic``, the ``/cam/classification`` results (plain vision_msgs subscriber)
    and the node's last perception diagnostics (values and level)."""

    def __init__(self, ros_env, proc, msg_type, topic: str) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from libredgetpu_ros.ros.perception_node import RESULT_QOS
        from rclpy.qos import qos_profile_sensor_data
        from vision_msgs.msg import Classification

        self.ros_env, self.proc = ros_env, proc
        self.node, self.executor = ros_env.probe("test_camera")
        self.results: list = []
        self.diag: dict[str, str] = {}
        self.level = -1
        self.node.create_subscription(Classification, "/cam/classification", self.results.append, RESULT_QOS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 10)
        self.camera = self.node.create_publisher(msg_type, topic, qos_profile_sensor_data)
        self.spin_until(lambda: self.camera.get_subscription_count() > 0
                        and self.node.count_publishers("/cam/classification") > 0, 30.0, "the node active")
        time.sleep(0.3)  # the far sides of the matches

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            if st.name.endswith(": perception"):
                self.diag = {kv.key: kv.value for kv in st.values}
                self.level = st.level[0] if isinstance(st.level, bytes) else int(st.level)

    def log(self) -> str:
        return (self.ros_env.work_dir / "bringup.log").read_text()

    def spin_until(self, predicate, timeout: float, what: str, every=None) -> None:
        """Spin until ``predicate()``; ``every`` runs before each spin (e.g. re-send a best-effort frame)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; bringup log:\n{self.log()}"
            assert self.proc.poll() is None, self.log()
            if every is not None:
                every()
            self.executor.spin_once(timeout_sec=0.1)

    def stop(self) -> None:
        """SIGTERM the bringup: it must exit 0."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=20) == 0
        self.executor.shutdown()
        self.node.destroy_node()
