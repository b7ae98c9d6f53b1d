"""One node style (issue 37 item 3, docs/architecture.md "Node style"): every node is a ``ManagedNode``
(``ros/lifecycle.py``), the camera nodes through ``CameraNode``, and its data-path subscriptions are the
node's own, in its data-path callback group: the control and reservoir nodes' state subscription, a camera
node's image and CameraInfo subscriptions. Each node runs its real ``main()`` in its own process; what
``ros2 node info /<ns>/<node>`` reads (the graph's subscriptions by node) lists the data topics once active
and none of them once deactivated, no helper node is left in the graph, and an input still gets its answer
(the group is spun). Before, the control and reservoir subscription lived on a companion node ``<node>_loop``
(``ros2 node info`` of the node listed no state topic), and the camera nodes had a lifecycle base of their
own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .._helpers import load_helper

supervision = load_helper(Path(__file__).resolve().parent / "_lifecycle_supervisor.py")

pytestmark = pytest.mark.ros

NS = "/style"
WAIT_S = 90.0  # a configure loads a model and its kernels: with a cold numba cache the looming node compiles
# them (17 s alone on the 2-core machine; twice that at load 6, where a 30 s bound failed now and then)


@dataclass(frozen=True)
class Kind:
    module: str
    params: dict[str, str]
    name: str  # the node's name
    inputs: tuple[str, ...]  # data topics (relative to NS) the active node subscribes to itself
    answer: Callable[[Any, str, list[object]], Callable[[], None]]  # subscribes; returns "send one input"


def _state_answer(kind: str) -> Callable[[Any, str, list[object]], Callable[[], None]]:
    def answer(sup: Any, name: str, seen: list[object]) -> Callable[[], None]:
        from diagnostic_msgs.msg import DiagnosticArray
        from std_msgs.msg import Float32MultiArray, Float64MultiArray

        msg_type = Float32MultiArray if kind == "control" else Float64MultiArray
        pub = sup.node.create_publisher(msg_type, f"{NS}/state", 10)
        if kind == "control":  # a command per state
            sup.node.create_subscription(Float32MultiArray, f"{NS}/{name}/command", seen.append, 10)
        else:  # the reservoir counts the states it took
            def counted(msg: DiagnosticArray) -> None:
                seen.extend(v for s in msg.status if s.name == f"{NS}/{name}: reservoir" for v in s.values
                            if v.key == "states" and v.value != "0")

            sup.node.create_subscription(DiagnosticArray, "/diagnostics", counted, 10)
        return lambda: pub.publish(msg_type(data=[0.25, -0.5]))

    return answer


def _looming_answer(sup: Any, name: str, seen: list[object]) -> Callable[[], None]:
    from libredgetpu_ros.ros.camera import RESULT_QOS
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image

    from libredgetpu_ros_interfaces.msg import Looming

    camera = sup.node.create_publisher(Image, f"{NS}/image_raw", qos_profile_sensor_data)
    sup.node.create_subscription(Looming, f"{NS}/looming", seen.append, RESULT_QOS)
    frame = Image(height=64, width=64, encoding="rgb8", step=64 * 3, data=bytes(range(256)) * 48)
    return lambda: camera.publish(frame)


KINDS = {
    "control": Kind("libredgetpu_ros.ros.control_node",
                    {"backend": "cpu", "template": "256", "state_size": "2", "command_size": "2"},
                    "control_node", ("state",), _state_answer("control")),
    "reservoir": Kind("libredgetpu_ros.ros.reservoir.node",
                      {"backend": "cpu", "template": "256", "state_size": "2",
                       "state_type": "float64_multi_array", "washout": "0"},
                      "reservoir", ("state",), _state_answer("reservoir")),
    "looming (camera)": Kind("libredgetpu_ros.ros.robotics.looming_node",
                             {"backend": "cpu", "template": "looming_64x64_3x3"},
                             "looming", ("image_raw", "camera_info"), _looming_answer),
}


def test_every_node_type_is_a_managed_node() -> None:
    """bringup's node types (every node the package runs) share the one skeleton, ``ManagedNode``."""
    from libredgetpu_ros.ros.bringup import NODE_TYPES, node_class
    from libredgetpu_ros.ros.camera import CameraNode
    from libredgetpu_ros.ros.lifecycle import ManagedNode

    assert issubclass(CameraNode, ManagedNode)
    others = [kind for kind in NODE_TYPES if not issubclass(node_class(kind), ManagedNode)]
    assert others == [], f"node types not derived from ManagedNode: {others}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ros2_node_info_lists_the_data_subscriptions_on_the_node(ros_env, kind: str) -> None:
    spec = KINDS[kind]
    params = [arg for name, value in spec.params.items() for arg in ("-p", f"{name}:={value}")]
    ros_env.spawn([sys.executable, "-m", spec.module, "--ros-args", "-r", f"__ns:={NS}", *params], spec.name)
    sup = supervision.LifecycleSupervisor(ros_env, "style_probe", f"{NS}/{spec.name}", WAIT_S)
    inputs = {f"{NS}/{topic}" for topic in spec.inputs}

    def subscriptions() -> set[str]:
        return {topic for topic, _ in sup.node.get_subscriber_names_and_types_by_node(spec.name, NS)}

    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for(lambda: f"{sorted(inputs)} among {sorted(subscriptions())}",
                 lambda: inputs <= subscriptions())
    assert f"{spec.name}_loop" not in sup.node.get_node_names()  # no helper node

    # The group is spun by the node's main(): an input gets its answer.
    seen: list[object] = []
    send = spec.answer(sup, spec.name, seen)
    sup.wait_for(f"an answer of {spec.name} to an input", lambda: seen, every=send)

    assert sup.transition("deactivate")
    sup.wait_for(lambda: f"{sorted(inputs)} gone from {sorted(subscriptions())}",
                 lambda: not inputs & subscriptions())
