"""One node style (issue 37 item 3, docs/architecture.md "Node style"): the control and reservoir nodes' state
subscription is the node's own, in its data-path callback group (``ros/lifecycle.py`` ``ManagedNode``), as
the camera nodes' image subscription is. Each node runs its real ``main()`` in its own process; what
``ros2 node info /<ns>/<node>`` reads (the graph's subscriptions by node) lists the state topic once active
and nothing once deactivated, no helper node is left in the graph, and a state still gets its answer (the
group is spun). Before, the subscription lived on a companion node ``<node>_loop`` (``ros2 node info`` of
the node listed no state topic).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .._helpers import load_helper

supervision = load_helper(Path(__file__).resolve().parent / "_lifecycle_supervisor.py")

pytestmark = pytest.mark.ros

NS = "/style"
NODES = {  # kind: (module and parameters, node name)
    "control": (["libredgetpu_ros.ros.control_node", "-p", "backend:=cpu", "-p", "template:=256",
                 "-p", "state_size:=2", "-p", "command_size:=2"], "control_node"),
    "reservoir": (["libredgetpu_ros.ros.reservoir.node", "-p", "backend:=cpu", "-p", "template:=256",
                   "-p", "state_size:=2", "-p", "state_type:=float64_multi_array", "-p", "washout:=0"],
                  "reservoir"),
}


@pytest.mark.parametrize("kind", sorted(NODES))
def test_ros2_node_info_lists_the_state_subscription_on_the_node(ros_env, kind: str) -> None:
    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import Float32MultiArray, Float64MultiArray

    (module, *params), name = NODES[kind]
    ros_env.spawn([sys.executable, "-m", module, "--ros-args", "-r", f"__ns:={NS}", *params], kind)
    sup = supervision.LifecycleSupervisor(ros_env, "style_probe", f"{NS}/{name}")
    state = f"{NS}/state"

    def subscriptions() -> set[str]:
        return {topic for topic, _ in sup.node.get_subscriber_names_and_types_by_node(name, NS)}

    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for(f"{state} among {name}'s subscriptions", lambda: state in subscriptions())
    assert f"{name}_loop" not in sup.node.get_node_names()  # no helper node any more

    # The group is spun by the node's main(): states are taken (a command, or the reservoir's count).
    msg_type = Float32MultiArray if kind == "control" else Float64MultiArray
    pub = sup.node.create_publisher(msg_type, state, 10)
    seen: list[object] = []
    if kind == "control":
        sup.node.create_subscription(Float32MultiArray, f"{NS}/{name}/command", seen.append, 10)
    else:
        def counted(msg: DiagnosticArray) -> None:
            seen.extend(v for s in msg.status if s.name == f"{NS}/{name}: reservoir" for v in s.values
                        if v.key == "states" and v.value != "0")

        sup.node.create_subscription(DiagnosticArray, "/diagnostics", counted, 10)
    sup.wait_for(f"an answer of {name} to a state", lambda: seen,
                 every=lambda: pub.publish(msg_type(data=[0.25, -0.5])))

    assert sup.transition("deactivate")
    sup.wait_for(f"{state} gone from {name}'s subscriptions", lambda: state not in subscriptions())
