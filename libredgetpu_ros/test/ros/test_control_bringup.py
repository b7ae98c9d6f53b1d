"""`libredgetpu-ros bringup` with a control node: its state loop (a companion node) is spun, commands flow.

The bringup runs in its own process over real DDS; this process publishes states and reads the commands.
"""

from __future__ import annotations

import signal
import time

import numpy as np
import pytest


@pytest.mark.ros
def test_bringup_spins_the_control_state_loop(ros_env, tmp_path) -> None:
    from libredgetpu_ros.matmul.engine import MatMulEngine
    from std_msgs.msg import Float32MultiArray

    # Inside the Dense(256) template's representable range (its per-row scales are ~3e-4).
    weights = np.array([[0.03, -0.02, 0.0, 0.01], [0.0, 0.02, -0.03, 0.025]], np.float32)
    np.save(tmp_path / "w.npy", weights)
    proc = ros_env.spawn_bringup(
        "nodes:\n"
        "  - type: control\n"
        "    name: ctl\n"
        "    namespace: arm\n"
        "    parameters:\n"
        "      backend: cpu\n"
        "      template: 256\n"
        "      state_size: 4\n"
        "      command_size: 2\n"
        f"      initial_weights: {tmp_path / 'w.npy'}\n"
        "      stale_timeout: 5.0\n"
    )
    node, executor = ros_env.probe("control_bringup_probe")
    commands: list[np.ndarray] = []
    node.create_subscription(Float32MultiArray, "/arm/ctl/command",
                             lambda msg: commands.append(np.asarray(msg.data, np.float32)), 10)
    pub = node.create_publisher(Float32MultiArray, "/arm/state", 10)
    x = np.array([1.0, -0.5, 0.25, 0.5], np.float32)
    deadline = time.monotonic() + 30.0
    # Publish until a command comes back: the node becomes active (and discovers us) some time after start.
    while not commands and time.monotonic() < deadline:
        assert proc.poll() is None, (ros_env.work_dir / "bringup.log").read_text()
        pub.publish(Float32MultiArray(data=x.tolist()))
        executor.spin_once(timeout_sec=0.2)
    log_path = ros_env.work_dir / "bringup.log"
    assert commands, f"no command from the bringup's control node; log:\n{log_path.read_text()}"
    # Exactly what the same engine computes in-process (the controller embedded in the 256x256 template),
    # and close to the float product.
    engine = MatMulEngine.from_template(256, backend="cpu")
    full = np.zeros((engine.rows, engine.cols), np.float32)
    full[:2, :4] = weights
    engine.set_weights(full)
    x_full = np.zeros(engine.cols, np.float32)
    x_full[:4] = x
    np.testing.assert_array_equal(commands[0], engine.matmul(x_full)[:2])
    np.testing.assert_allclose(commands[0], weights @ x, atol=0.01)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    log = log_path.read_text()
    assert "/arm/ctl: active" in log and "stopping" in log
    executor.shutdown()
    node.destroy_node()
