"""The nodes' ``main()`` (``spinning.run_lifecycle_node_main``, shared by the control, perception and SPU
entry points): each node in its own process over real (localhost-only) DDS, stopped by SIGINT (Ctrl-C) or
SIGTERM while ``active`` (engine / pipeline open, companion thread spinning) or ``unconfigured``, must tear
down and exit with code 0 within 15 s, with no traceback in its log.
"""

from __future__ import annotations

import signal
import sys
import time

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.timeout(90)]

NS = "/main_test"
CLASSIFIER = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


def _command(node: str, fixture_path) -> tuple[list[str], str]:
    """(command line, lifecycle node name) of ``node`` in namespace NS."""
    ros_args = ["--ros-args", "-r", f"__ns:={NS}"]
    if node == "control":
        return ([sys.executable, "-m", "libredgetpu_ros.ros.control_node", *ros_args, "-p", "backend:=cpu",
                 "-p", "template:=256", "-p", "state_size:=5", "-p", "command_size:=3"], "control_node")
    if node == "perception":
        return ([sys.executable, "-m", "libredgetpu_ros.ros.perception_node", *ros_args, "-p", "backend:=cpu",
                 "-p", f"model:={fixture_path(CLASSIFIER)}"], "perception")
    return [sys.executable, "-m", "libredgetpu_ros.ros.spu.node", *ros_args], "spu"


@pytest.mark.parametrize(("node", "signum", "active"), [
    ("control", signal.SIGINT, True),
    ("control", signal.SIGTERM, True),
    ("perception", signal.SIGINT, True),
    ("perception", signal.SIGTERM, True),
    ("spu", signal.SIGTERM, False),
], ids=["control-SIGINT", "control-SIGTERM", "perception-SIGINT", "perception-SIGTERM", "spu-SIGTERM"])
def test_a_signal_tears_the_node_down_and_exits_0(ros_env, fixture_path, node, signum, active) -> None:
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState, GetState

    command, name = _command(node, fixture_path)
    proc = ros_env.spawn(command, node)
    probe, executor = ros_env.probe("main_test_supervisor")

    def call(client, request):
        future = client.call_async(request)
        executor.spin_until_future_complete(future, timeout_sec=20.0)
        assert future.done(), f"no answer from {client.srv_name}"
        return future.result()

    change = probe.create_client(ChangeState, f"{NS}/{name}/change_state")
    get = probe.create_client(GetState, f"{NS}/{name}/get_state")
    assert change.wait_for_service(timeout_sec=20.0) and get.wait_for_service(timeout_sec=20.0)
    if active:
        for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            assert call(change, ChangeState.Request(transition=Transition(id=transition))).success
    expected = "active" if active else "unconfigured"
    assert call(get, GetState.Request()).current_state.label == expected

    started = time.monotonic()
    proc.send_signal(signum)
    code = proc.wait(timeout=15)
    log = (ros_env.work_dir / f"{node}.log").read_text()
    assert code == 0, f"exit code {code} after {signal.Signals(signum).name}:\n{log[-3000:]}"
    assert "Traceback" not in log, log[-3000:]
    assert time.monotonic() - started < 15.0
