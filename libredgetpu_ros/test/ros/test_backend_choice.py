"""Issue 22 item 5: which backend runs is visible, and a robot can refuse to start without the accelerator.

In process (rclpy over localhost DDS, no accelerator on this machine; skipped where one is attached):

- perception, ``backend: auto``: configure succeeds on the CPU twin; diagnostics name the reason
  (``backend_choice``), the file actually running (the twin) and WARN about the fallback;
- perception and control, ``require_accelerator: true``: configure fails naming the reason, the node stays
  unconfigured, nothing stays open;
- ``backend: cpu`` asked for explicitly is no fallback: no WARN.
"""

from __future__ import annotations

import pytest
from libredgetpu_ros.backends import edgetpu_attached

pytestmark = [pytest.mark.ros, pytest.mark.timeout(60),
              pytest.mark.skipif(edgetpu_attached(), reason="an Edge TPU is attached: no fallback to show")]

CLASSIFIER = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


def _perception(ros_env, fixture_path, **params):
    from libredgetpu_ros.ros.perception_node import PerceptionNode
    from rclpy.parameter import Parameter

    overrides = {"model": str(fixture_path(CLASSIFIER)), "task": "classify", **params}
    return PerceptionNode("perception_choice", context=ros_env.init_rclpy(),
                          parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])


def test_auto_on_the_cpu_is_named_and_warned_about(ros_env, fixture_path) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn

    node = _perception(ros_env, fixture_path, backend="auto")
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        values = node.diagnostic_values()
        assert values["backend"] == "cpu"
        assert values["backend_choice"].startswith("auto: no Edge TPU"), values
        assert values["model_running"].endswith("mobilenet_v1_0.25_128_quant.tflite"), values  # the twin
        (warning,) = node.diagnostic_warnings()
        assert "running on the CPU" in warning and "require_accelerator" in warning
    finally:
        node.teardown()
        node.destroy_node()


def test_cpu_asked_for_is_not_a_fallback(ros_env, fixture_path) -> None:
    from rclpy.lifecycle import TransitionCallbackReturn

    node = _perception(ros_env, fixture_path, backend="cpu")
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.diagnostic_values()["backend_choice"] == "cpu (requested)"
        assert node.diagnostic_warnings() == []
    finally:
        node.teardown()
        node.destroy_node()


@pytest.mark.parametrize("backend", ["auto", "cpu"])
def test_perception_require_accelerator_fails_configure(ros_env, fixture_path, backend) -> None:
    from libredgetpu_ros.errors import DeviceNotFoundError
    from rclpy.lifecycle import TransitionCallbackReturn

    node = _perception(ros_env, fixture_path, backend=backend, require_accelerator=True)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.state_label() == "unconfigured" and node.processor is None
        expected = "auto: no Edge TPU" if backend == "auto" else "cpu .requested."
        with pytest.raises(DeviceNotFoundError, match=f"require_accelerator is true .*{expected}"):
            node.open_processor()  # what configure ran: the reason it logged
        assert node.processor is None
    finally:
        node.destroy_node()


def test_control_require_accelerator_fails_configure_and_auto_warns(ros_env) -> None:
    from libredgetpu_ros.ros.control_node import ControlNode
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter

    context = ros_env.init_rclpy()
    strict = ControlNode(context=context, parameter_overrides=[
        Parameter("require_accelerator", value=True), Parameter("template", value=256)])
    try:
        assert strict.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert strict._ctl is None
    finally:
        strict.destroy_node()
    relaxed = ControlNode("control_relaxed", context=context,
                          parameter_overrides=[Parameter("template", value=256)])
    try:
        assert relaxed.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert relaxed._fallback().startswith("auto: no Edge TPU")
    finally:
        relaxed.teardown()
        relaxed.destroy_node()
