"""The control node with ``backend:=tpulang`` in its own process over real (localhost-only) DDS: its commands
equal, bit for bit, an in-process MatMulEngine on the CPU twin holding the same weights, across a swap."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from .._helpers import load_helper

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

HARNESS = Path(__file__).resolve().parents[1] / "ros" / "_control_harness.py"
harness = load_helper(HARNESS)

NS = "/tpulang"
ROWS, COLS = 3, 6


def _expected(engine, weights: np.ndarray, x: np.ndarray) -> np.ndarray:
    """What the node computes: W embedded top-left in the template, x zero-filled to its width."""
    full = np.zeros((engine.rows, engine.cols), np.float32)
    full[:ROWS, :COLS] = weights
    engine.set_weights(full)
    x_full = np.zeros(engine.cols, np.float32)
    x_full[:COLS] = x
    return engine.matmul(x_full)[:ROWS]


def test_control_node_on_tpulang_backend(ros_env) -> None:
    from libredgetpu_ros.matmul import MatMulEngine
    from std_msgs.msg import Float32MultiArray

    ros_env.spawn(harness.node_args(NS, "backend:=tpulang", f"state_size:={COLS}", f"command_size:={ROWS}",
                                    "stale_timeout:=30.0", "diagnostics_period:=0.2"), "control_node")
    ctl = harness.ControlHarness(ros_env.init_rclpy(), f"{NS}/control_node")
    reference = MatMulEngine.from_template(256, backend="cpu")
    rng = np.random.default_rng(11)
    try:
        assert ctl.transition(harness.T_CONFIGURE), "configure failed (see the control_node log)"
        limits = np.frombuffer(ctl.get_weights().weight_max, np.float32)
        assert ctl.transition(harness.T_ACTIVATE)
        pub = ctl.node.create_publisher(Float32MultiArray, f"{NS}/state", 10)
        ctl.wait_for(lambda: pub.get_subscription_count() > 0, 20.0, "the node's state subscription")
        time.sleep(0.3)
        sent: list[tuple[np.ndarray, np.ndarray]] = []  # (weights in use, state)
        for _ in range(2):  # two weight versions
            weights = (rng.uniform(-0.8, 0.8, (ROWS, COLS)) * limits[:, None]).astype(np.float32)
            resp = ctl.set_weights(weights)
            assert resp.accepted, resp.message
            for _ in range(4):
                x = rng.uniform(-1, 1, COLS).astype(np.float32)
                count = len(ctl.commands())
                pub.publish(Float32MultiArray(data=x.tolist()))
                ctl.wait_for(lambda count=count: len(ctl.commands()) > count, 10.0, "a command")
                sent.append((weights, x))
        commands = ctl.commands()
        assert len(commands) == len(sent)
        versions = [version for _r, _s, version, _y in commands]
        assert versions[:4] == [versions[0]] * 4 and versions[4:] == [versions[0] + 1] * 4
        for (_r, _s, _v, y), (weights, x) in zip(commands, sent, strict=True):
            np.testing.assert_array_equal(y, _expected(reference, weights, x))
        # The node really runs on the TpuLang executor (its diagnostics name the engine's backend).
        ctl.wait_for(lambda: any(status.hardware_id == "tpulang" and any(
            kv.key == "engine" and kv.value.endswith("on tpulang") for kv in status.values)
            for status in ctl.recorded.diagnostics), 10.0, "diagnostics naming the tpulang engine")
    finally:
        ctl.close()
