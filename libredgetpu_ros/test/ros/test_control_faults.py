"""Faults in the control node's state loop, across processes over real (localhost-only) DDS.

- A state holding NaN/inf (Float32MultiArray or JointState) is dropped and counted, diagnostics say WARN
  with the cause, and the next good state produces a command (it used to end the loop thread for good).
- An unexpected exception in the loop takes the node through ``on_error`` to ``unconfigured`` (logged), and
  configure + activate bring it back: the loop's executor thread survives.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import _control_harness as harness  # registered by conftest.py
import numpy as np
import pytest

from .._helpers import load_helper

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

HERE = Path(__file__).resolve().parent

NS = "/faults"
FQN = f"{NS}/control_node"
JOINTS = ["a", "b", "c", "d", "e"]
GOOD = np.array([0.5, -0.25, 0.75, -0.9, 0.1], np.float32)


def _start(ros_env, *params: str, program: list[str] | None = None) -> harness.ControlHarness:
    ctl = harness.start_configured(ros_env, NS, "state_size:=5", "command_size:=3", "state_queue:=10",
                                   "diagnostics_period:=0.2", "stale_timeout:=30.0", *params, program=program)
    assert ctl.transition(harness.T_ACTIVATE)
    return ctl


def _state_publisher(ctl: harness.ControlHarness, joint: bool):
    """(publisher, make(values) -> message) for the node's state topic."""
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float32MultiArray

    if joint:
        pub = ctl.node.create_publisher(JointState, f"{NS}/state", 10)

        def make(x: np.ndarray) -> JointState:  # unstamped: timed by its arrival
            return JointState(name=JOINTS, position=np.asarray(x, np.float64).tolist())
    else:
        pub = ctl.node.create_publisher(Float32MultiArray, f"{NS}/state", 10)

        def make(x: np.ndarray) -> Float32MultiArray:
            return Float32MultiArray(data=np.asarray(x, np.float32).tolist())
    ctl.wait_for(lambda: pub.get_subscription_count() > 0, 20.0, "the node's state subscription")
    time.sleep(0.3)  # the reliable reader finishes matching
    return pub, make


def _values(status) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


@pytest.mark.parametrize("state_type", ["float32_multi_array", "joint_state"])
def test_non_finite_states_are_dropped_and_the_loop_goes_on(ros_env, state_type):
    joint = state_type == "joint_state"
    extra = (f"joint_names:={JOINTS!r}".replace("'", '"'),) if joint else ()
    ctl = _start(ros_env, f"state_type:={state_type}", *extra)
    try:
        pub, make = _state_publisher(ctl, joint)
        for k, bad in enumerate((np.nan, np.inf, -np.inf)):
            poisoned = GOOD.copy()
            poisoned[2] = bad
            pub.publish(make(poisoned))
            time.sleep(0.1)
            pub.publish(make(GOOD))
            ctl.wait_for(lambda k=k: len(ctl.commands()) >= k + 1, 10.0, f"a command after bad state {bad}")
            time.sleep(0.2)
            assert len(ctl.commands()) == k + 1, "a bad state must not produce a command"

        def warned():
            return next((s for s in reversed(ctl.recorded.diagnostics)
                         if s.level == b"\x01" and "invalid state" in s.message), None)

        ctl.wait_for(lambda: warned() is not None, 10.0, "a WARN naming the invalid state")
        assert "non-finite" in warned().message and "index 2" in warned().message, warned().message
        ctl.wait_for(lambda: _values(ctl.recorded.diagnostics[-1])["invalid_states"] == "3", 5.0,
                     "invalid_states = 3")
        last = _values(ctl.recorded.diagnostics[-1])
        assert last["commands"] == "3" and last["states"] == "6", last
        assert "non-finite" in last["last_invalid_state"], last
        assert ctl.state() == "active"
    finally:
        ctl.close()


def test_a_crash_in_the_state_loop_goes_through_on_error_and_is_recoverable(ros_env):
    faulty = HERE / "_control_faulty_node.py"
    poison_value = load_helper(faulty)
    ctl = _start(ros_env, program=[sys.executable, str(faulty)])
    try:
        pub, make = _state_publisher(ctl, joint=False)
        pub.publish(make(GOOD))
        ctl.wait_for(lambda: len(ctl.commands()) == 1, 10.0, "a command before the fault")
        poison = GOOD.copy()
        poison[0] = poison_value.POISON
        pub.publish(make(poison))
        ctl.wait_for(lambda: ctl.state() == "unconfigured", 10.0,
                     "the node to leave 'active' through on_error")
        log = (ros_env.work_dir / "control_node.log").read_text()
        assert "state loop crashed" in log and "injected fault in the state loop" in log, log[-3000:]
        ctl.wait_for(lambda: any(s.level == b"\x02" and "state loop crashed" in s.message
                                 for s in ctl.recorded.diagnostics), 5.0, "an ERROR diagnostics status")
        # Recoverable: the loop's executor thread still runs.
        assert ctl.transition(harness.T_CONFIGURE)
        assert ctl.transition(harness.T_ACTIVATE)
        ctl.wait_for(lambda: pub.get_subscription_count() > 0, 20.0, "the new state subscription")
        time.sleep(0.3)
        pub.publish(make(GOOD))
        ctl.wait_for(lambda: len(ctl.commands()) == 2, 10.0, "a command after reconfiguring")
    finally:
        ctl.close()


def test_states_of_ever_new_sizes_warn_once(ros_env):
    """In process: states whose size drifts (an upstream list that grows by one each cycle) are dropped and
    counted, and logged once, as docs/control_node.md says. Before, each new size was logged (and kept in a
    set): one WARN per state and a set growing for as long as the drift lasted."""
    from libredgetpu_ros.ros.control.node import ControlNode
    from rclpy.parameter import Parameter
    from std_msgs.msg import Float32MultiArray

    node = ControlNode("control_drift", context=ros_env.init_rclpy(), parameter_overrides=[
        Parameter("backend", value="cpu"), Parameter("template", value=256), Parameter("state_size", value=3),
        Parameter("command_size", value=2)])
    warnings: list[str] = []

    class Logger:
        def __getattr__(self, name: str):
            return warnings.append if name == "warning" else (lambda *a, **k: None)

    try:
        node.trigger_configure()
        node.trigger_activate()
        node.get_logger = Logger  # type: ignore[method-assign]
        for size in range(4, 54):
            node._on_float_state(Float32MultiArray(data=[0.1] * size))
        assert node._loop.size_mismatch == 50 and node._loop.commands == 0
        assert len([w for w in warnings if "state_size" in w]) == 1, warnings[:3]
        assert len(node._loop.warned) == 1
        node._on_float_state(Float32MultiArray(data=[0.1] * 3))
        assert node._loop.commands == 1
    finally:
        node.teardown()
        node.destroy_node()
