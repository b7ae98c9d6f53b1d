"""A camera node's topic parameters (``input_topic``, ``camera_info_topic``) are checked on configure: a name
that is not a valid ROS topic fails configure naming the parameter, and the node stays unconfigured. It was
accepted, then rcl's name resolution raised in the diagnostics timer, out of the executor: the node's process
ended at the first status."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

CLASSIFIER = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


def _node(ros_env, fixture_path, kind: str, **params):
    from libredgetpu_ros.ros.bringup import node_class
    from rclpy.parameter import Parameter

    base = {"perception": {"model": str(fixture_path(CLASSIFIER)), "task": "classify"},
            "tracker": {"template": "color_red_64x64", "publish_markers": True},
            "flow": {"use_camera_info": True}}[kind]
    values = {**base, "backend": "cpu", "diagnostics_period": 0.1, **params}
    return node_class(kind)(f"{kind}_topics", context=ros_env.init_rclpy(),
                            parameter_overrides=[Parameter(k, value=v) for k, v in values.items()])


@pytest.mark.parametrize(("kind", "param", "value"), [
    ("perception", "input_topic", "front camera/image_raw"),
    ("tracker", "input_topic", "image-raw"),
    ("tracker", "camera_info_topic", "cam/info?"),
    ("flow", "camera_info_topic", "/cam//camera_info"),
])
def test_a_bad_topic_parameter_fails_configure_naming_it(ros_env, fixture_path, kind: str, param: str,
                                                         value: str) -> None:
    from libredgetpu_ros.errors import ConfigError
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import TransitionCallbackReturn

    node = _node(ros_env, fixture_path, kind, **{param: value})
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.FAILURE
        assert node.state_label() == "unconfigured" and node.processor is None
        with pytest.raises(ConfigError, match=f"parameter {param} .* is not a valid ROS topic name"):
            node.read_config()  # what configure ran: the reason it logged
        deadline = time.monotonic() + 0.5  # five diagnostics periods: no timer runs, nothing escapes
        while time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
    finally:
        executor.shutdown()
        node.destroy_node()


def test_valid_topic_parameters_configure(ros_env, fixture_path) -> None:
    """Relative, absolute and private names, as remapped cameras give them, are accepted as before."""
    from rclpy.lifecycle import TransitionCallbackReturn

    node = _node(ros_env, fixture_path, "tracker", input_topic="~/front/image_raw",
                 camera_info_topic="/robot/front/camera_info")
    try:
        assert node.trigger_configure() == TransitionCallbackReturn.SUCCESS
        assert node.camera_info_topic() == "/robot/front/camera_info"
    finally:
        node.teardown()
        node.destroy_node()
