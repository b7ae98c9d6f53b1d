"""``qos_overrides`` of the nodes' outputs (ros/output_qos.py, rclpy's QoSOverridingOptions), across
processes: a params file overrides reliability, durability and depth of one output; another process sees the
offered QoS change on that topic only (reliability and durability travel with discovery), and reads the depth
back as ``ros2 param get`` would (depth is local to the writer). A depth of 0 fails configure naming the
topic. Before: no output declared these parameters and the file changed nothing."""

from __future__ import annotations

import sys

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

NS = "/qos"
CLASSIFIER = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


def _node(ros_env, fixture_path, kind: str, overrides: dict) -> tuple[str, str, str]:
    """Start a ``kind`` node in NS with ``overrides`` as its qos_overrides; (name, overridden topic,
    another output topic)."""
    import yaml

    if kind == "perception":
        name, module, params = "perception", "libredgetpu_ros.ros.perception_node", {
            "model": str(fixture_path(CLASSIFIER)), "backend": "cpu"}
        topic, other = f"{NS}/classification", f"{NS}/annotated"
    else:
        name, module, params = "control_node", "libredgetpu_ros.ros.control_node", {
            "backend": "cpu", "template": 256, "state_size": 5, "command_size": 3}
        topic, other = f"{NS}/control_node/command", f"{NS}/control_node/command_stamped"
    params["qos_overrides"] = {topic: {"publisher": overrides}}
    path = ros_env.work_dir / f"{kind}.yaml"
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}))
    ros_env.spawn([sys.executable, "-m", module, "--ros-args", "-r", f"__ns:={NS}",
                   "--params-file", str(path)], kind)
    return name, topic, other


class _Probe:
    def __init__(self, ros_env, name: str) -> None:
        from lifecycle_msgs.srv import ChangeState
        from rcl_interfaces.srv import GetParameters

        self.node, self.executor = ros_env.probe("qos_probe")
        self.change = self.node.create_client(ChangeState, f"{NS}/{name}/change_state")
        self.params = self.node.create_client(GetParameters, f"{NS}/{name}/get_parameters")
        for client in (self.change, self.params):
            assert client.wait_for_service(timeout_sec=30.0), client.srv_name

    def call(self, client, request):
        future = client.call_async(request)
        self.executor.spin_until_future_complete(future, timeout_sec=30.0)
        assert future.done(), f"no answer from {client.srv_name}"
        return future.result()

    def configure(self) -> bool:
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        return self.call(self.change, ChangeState.Request(
            transition=Transition(id=Transition.TRANSITION_CONFIGURE))).success

    def parameter(self, name: str):
        from rcl_interfaces.srv import GetParameters

        value, = self.call(self.params, GetParameters.Request(names=[name])).values
        return value

    def offered(self, topic: str):
        """The QoS the node's writer offers on ``topic``, once discovered."""
        import time

        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            found = self.node.get_publishers_info_by_topic(topic)
            if found:
                return found[0].qos_profile
            self.executor.spin_once(timeout_sec=0.1)
        raise AssertionError(f"no publisher on {topic}")


@pytest.mark.parametrize("kind", ["perception", "control"])
def test_a_params_file_overrides_an_outputs_qos(ros_env, fixture_path, kind: str) -> None:
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

    name, topic, other = _node(ros_env, fixture_path, kind,
                               {"reliability": "best_effort", "durability": "transient_local", "depth": 2})
    probe = _Probe(ros_env, name)
    assert probe.configure()
    offered = probe.offered(topic)
    assert offered.reliability == ReliabilityPolicy.BEST_EFFORT
    assert offered.durability == DurabilityPolicy.TRANSIENT_LOCAL
    assert probe.parameter(f"qos_overrides.{topic}.publisher.depth").integer_value == 2
    # The other outputs keep the node's profile (it is shared between publishers: it must not change).
    assert probe.offered(other).reliability == ReliabilityPolicy.RELIABLE
    assert probe.parameter(f"qos_overrides.{other}.publisher.reliability").string_value == "reliable"


def test_an_invalid_override_fails_configure_naming_the_topic(ros_env, fixture_path) -> None:
    import time

    name, topic, _ = _node(ros_env, fixture_path, "perception", {"depth": 0})
    probe = _Probe(ros_env, name)
    assert not probe.configure()
    deadline = time.monotonic() + 10.0
    log = ""
    while f"qos_overrides of {topic}" not in log and time.monotonic() < deadline:
        time.sleep(0.1)
        log = (ros_env.work_dir / "perception.log").read_text()
    assert f"qos_overrides of {topic}" in log and "depth 0" in log, log[-2000:]
