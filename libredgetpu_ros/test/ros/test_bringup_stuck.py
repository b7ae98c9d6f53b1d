"""``bringup``'s stop with one node's data-path call stuck (in one process with real rclpy, as
``libredgetpu-ros bringup`` runs its nodes): a perception node and a control node whose MatMul runner holds
one call (``_held_runner_node.HeldRunner`` in place of the ``cpu`` runner), a state published from a probe
of its own.

Required: ``Bringup.stop()`` waits for the held call once (the control node's deactivate, its
``deactivate_timeout``: one run of ``deactivate: waiting`` WARNs, no other transition's), returns within that
bound and a margin well under a second bound, and raises that the control node's thread did not end, naming
the call the deactivate gave up on; the control node's engine is never closed under the held call (no
shutdown transition: the node stays active); the perception node, stopped after it, is shut down all the
same (its processor closed) and every node is gone from the bringup. Before, the control node's shutdown
waited for the call without a bound; then, once bounded, the thread's error ended ``stop()`` before the other
nodes were brought down; then the same call was waited for three times (deactivate, the shutdown's teardown,
the thread's 5 s join: 2 x ``deactivate_timeout`` + 5 s, 13.x s here against 4.x s now).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from .._helpers import load_helper

HERE = Path(__file__).resolve().parent
held = load_helper(HERE / "_held_runner_node.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

WAIT_S = 40.0
TIMEOUT_S = 4.0  # the control node's deactivate_timeout
MARGIN_S = 5.0  # the ERROR's acknowledgement (0.5 s), the perception node's bring-down, a loaded machine
CLASSIFIER = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


def test_stop_brings_every_node_down_past_a_stuck_one(ros_env, tmp_path: Path, fixture_path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from libredgetpu_ros.matmul import runners
    from libredgetpu_ros.matmul.twin import TwinRunner
    from libredgetpu_ros.ros.bringup import Bringup, NodeSpec
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float32MultiArray

    supervision = load_helper(HERE / "_lifecycle_supervisor.py")
    monkeypatch.setitem(runners._factories, "cpu",
                        lambda template, device: held.HeldRunner(TwinRunner(template.quant), tmp_path))
    specs = [NodeSpec("perception", "cam", "", {"model": str(fixture_path(CLASSIFIER)), "backend": "cpu"}),
             NodeSpec("control", "ctl", "", {"backend": "cpu", "template": 256, "state_size": 2,
                                             "command_size": 2, "state_topic": "/bstuck/state",
                                             "stale_timeout": 30.0, "deactivate_timeout": TIMEOUT_S})]
    bringup = Bringup(specs, context=ros_env.init_rclpy(), log=lambda text: None)
    bringup.start()
    cam, ctl = bringup.nodes
    warnings: list[str] = []
    logger = ctl._guard._logger  # the data-path guard's WARNs ("<transition>: waiting ...") recorded too

    class Recorder:
        def warning(self, text: str) -> None:
            warnings.append(text)
            logger.warning(text)

        def __getattr__(self, name: str):
            return getattr(logger, name)

    ctl._guard._logger = Recorder()
    closed: list[str] = []
    close = cam.close_processor
    cam.close_processor = lambda: (closed.append("perception"), close())[1]
    spin_stop = threading.Event()
    spinner = threading.Thread(target=bringup.spin_until, args=(spin_stop,), daemon=True)
    spinner.start()
    probe = supervision.Probe(ros_env, "bstuck_probe", WAIT_S)
    states = probe.node.create_publisher(Float32MultiArray, "/bstuck/state", QoSProfile(depth=10))
    state = Float32MultiArray(data=[0.5, -0.25])
    try:
        probe.wait_for("the control node's state subscription", lambda: states.get_subscription_count() > 0)
        held.first_call_then_hold(probe, tmp_path, lambda: states.publish(state))
        spin_stop.set()
        spinner.join(WAIT_S)
        done, raised = threading.Event(), []

        def stop() -> None:
            try:
                bringup.stop()
            except Exception as exc:
                raised.append(exc)
            finally:
                done.set()

        started = time.monotonic()
        threading.Thread(target=stop, daemon=True).start()
        assert done.wait(WAIT_S), "Bringup.stop() never returned with the control node's call held"
        took = time.monotonic() - started
        assert len(raised) == 1 and "did not end" in str(raised[0]), raised
        assert "spin_ctl" in str(raised[0]) and "given up on by deactivate" in str(raised[0]), raised
        waits = [w for w in warnings if ": waiting " in w]
        assert waits and all(w.startswith("deactivate: waiting") for w in waits), waits
        assert took < TIMEOUT_S + MARGIN_S, f"stop took {took:.1f} s: the held call waited for more than once"
        assert ctl._state_machine.current_state[1] == "active", "a transition ran under the held call"
        assert closed, "the perception node was not shut down after the stuck one"
        assert bringup.nodes == [] and bringup.executor is None
        events = held.events(tmp_path)
        assert events[-1] == "held" and not any(e.startswith("close") for e in events), events
    finally:
        (tmp_path / "release").touch()


def test_a_hurried_stop_still_waits_for_a_later_nodes_normal_call(ros_env, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Two control nodes, each with a held call; the stop hurried (``data_guard.STOP_HURRIED``: launch's
    SIGTERM came). The node stopped first is really stuck: its deactivate gives up after the hurry's grace.
    The node stopped next has a normal call in flight (released 0.15 s into its deactivate's wait, a frame
    that takes a moment): it returns within the grace (``HURRY_GRACE_S``), the node is deactivated, shut down
    (its runner closed with nothing in flight) and destroyed; only the stuck node is raised. Before, the
    wait gave that call one 50 ms poll: a false "did not return" for the second node too, which stayed up."""
    from libredgetpu_ros.matmul import runners
    from libredgetpu_ros.matmul.twin import TwinRunner
    from libredgetpu_ros.ros.bringup import Bringup, NodeSpec
    from libredgetpu_ros.ros.data_guard import STOP_HURRIED
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float32MultiArray

    supervision = load_helper(HERE / "_lifecycle_supervisor.py")
    folders = [tmp_path / "normal", tmp_path / "stuck"]  # in the specs' order: the runners' configure order
    for folder in folders:
        folder.mkdir()
    made: list[Path] = []

    def runner(template, device):
        made.append(folders[len(made)])
        return held.HeldRunner(TwinRunner(template.quant), made[-1])

    monkeypatch.setitem(runners._factories, "cpu", runner)
    params = {"backend": "cpu", "template": 256, "state_size": 2, "command_size": 2, "stale_timeout": 30.0,
              "deactivate_timeout": 20.0}
    specs = [NodeSpec("control", name, "", {**params, "state_topic": f"/bhurry/{name}"})
             for name in ("normal", "stuck")]
    bringup = Bringup(specs, context=ros_env.init_rclpy(), log=lambda text: None)
    bringup.start()
    normal, stuck = bringup.nodes
    assert made == folders, made
    spin_stop = threading.Event()
    spinner = threading.Thread(target=bringup.spin_until, args=(spin_stop,), daemon=True)
    spinner.start()
    probe = supervision.Probe(ros_env, "bhurry_probe", WAIT_S)
    state = Float32MultiArray(data=[0.5, -0.25])
    try:
        for name, folder in zip(("normal", "stuck"), folders, strict=True):
            pub = probe.node.create_publisher(Float32MultiArray, f"/bhurry/{name}", QoSProfile(depth=10))
            probe.wait_for(f"{name}'s state subscription", lambda pub=pub: pub.get_subscription_count() > 0)
            held.first_call_then_hold(probe, folder, lambda pub=pub: pub.publish(state))
        spin_stop.set()
        spinner.join(WAIT_S)

        def release_during_its_wait() -> None:  # once the normal node's deactivate turned its inputs off
            deadline = time.monotonic() + WAIT_S
            while stuck._guard.gave_up is None or normal._guard._on:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.005)
            time.sleep(0.15)
            (folders[0] / "release").touch()

        releaser = threading.Thread(target=release_during_its_wait, daemon=True)
        releaser.start()
        STOP_HURRIED.hurry("a second stop signal (SIGTERM, 5.0 s after SIGINT)")
        with pytest.raises(Exception) as raised:
            bringup.stop()
        releaser.join(WAIT_S)
    finally:
        STOP_HURRIED.clear()
        for folder in folders:
            (folder / "release").touch()
    assert "spin_stuck" in str(raised.value) and "spin_normal" not in str(raised.value), raised.value
    events = held.events(folders[0])
    assert events[-1] == "close in_flight=0" and "use-after-close" not in events, \
        f"the normal node was not shut down after its call returned: {events}"
    assert bringup.nodes == [] and bringup.executor is None


def test_a_deactivate_that_raises_still_closes_the_nodes_processor(ros_env, fixture_path) -> None:
    """A node whose deactivate raises (not a FAILURE result: rclpy or the node failed under it) with no call
    in flight: ``Bringup.stop()`` raises that error, and the node's processor is closed (``teardown``) before
    it is destroyed. Before, the node was destroyed with neither the shutdown transition nor a teardown: its
    device / engine stayed open until the process exited."""
    from libredgetpu_ros.ros.bringup import Bringup, NodeSpec

    specs = [NodeSpec("perception", "cam", "", {"model": str(fixture_path(CLASSIFIER)), "backend": "cpu"})]
    bringup = Bringup(specs, context=ros_env.init_rclpy(), log=lambda text: None)
    bringup.start()
    (cam,) = bringup.nodes
    closed: list[str] = []
    close = cam.close_processor
    cam.close_processor = lambda: (closed.append("perception"), close())[1]

    def deactivate_raises():
        raise RuntimeError("deactivate broke")

    cam.trigger_deactivate = deactivate_raises
    with pytest.raises(RuntimeError, match="deactivate broke"):
        bringup.stop()
    assert closed == ["perception"], "the node was destroyed with its processor open"
    assert bringup.nodes == [] and bringup.executor is None


@pytest.mark.parametrize("signals", ["sigint", "sigint_then_sigterm"])
def test_the_bringup_command_exits_3_with_its_error_line(ros_env, tmp_path: Path, signals: str) -> None:
    """``libredgetpu-ros bringup`` (a real process) with the control node's engine call held, stopped by
    SIGINT: past the node's one wait (``deactivate_timeout`` 3 s) one ERROR line ``exit on SIGINT: <the
    call>``, exit status 3 (``stuck_exit.EXIT_DATA_PATH_STUCK``, as a node's own ``main()``), no traceback,
    the engine never closed under the call. With SIGTERM 2 s after the SIGINT (launch's escalation, 5 s under
    its defaults) and the default ``deactivate_timeout`` (10 s): the SIGTERM ends the wait at once, the
    ERROR says so. Before: ``CompanionThreadsStuck`` escaped ``run()``: a traceback, exit status 1, and the
    full ``deactivate_timeout`` whatever came."""
    import signal
    import sys

    from libredgetpu_ros.ros.stuck_exit import EXIT_DATA_PATH_STUCK
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float32MultiArray

    supervision = load_helper(HERE / "_lifecycle_supervisor.py")
    hurried = signals == "sigint_then_sigterm"
    timeout = {} if hurried else {"deactivate_timeout": 3.0}
    config = tmp_path / "bringup.yaml"
    params = {"backend": "cpu", "template": 256, "state_size": 2, "command_size": 2,
              "state_topic": "/bcmd/state", "stale_timeout": 30.0, **timeout}
    config.write_text("nodes:\n  - type: control\n    name: bctl\n    parameters:\n" +
                      "".join(f"      {key}: {value!r}\n" for key, value in params.items()).replace("'", ""))
    proc = ros_env.spawn([sys.executable, str(HERE / "_held_runner_node.py"), str(tmp_path),
                          "libredgetpu_ros.cli.main", "bringup", str(config)], "bringup", expect_exit=True)
    probe = supervision.Probe(ros_env, "bcmd_probe", WAIT_S)
    states = probe.node.create_publisher(Float32MultiArray, "/bcmd/state", QoSProfile(depth=10))
    state = Float32MultiArray(data=[0.5, -0.25])
    probe.wait_for("the control node's state subscription", lambda: states.get_subscription_count() > 0)
    held.first_call_then_hold(probe, tmp_path, lambda: states.publish(state))
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    if hurried:
        probe.spin_for(2.0)
        assert proc.poll() is None, "bringup exited before its wait for the held call was over"
        proc.send_signal(signal.SIGTERM)
    probe.wait_for("bringup's exit", lambda: proc.poll() is not None, timeout=WAIT_S)
    took = time.monotonic() - started
    log = (ros_env.work_dir / "bringup.log").read_text()
    assert proc.returncode == EXIT_DATA_PATH_STUCK, f"exit {proc.returncode}:\n{log[-3000:]}"
    assert "Traceback" not in log, log[-3000:]
    errors = [line for line in log.splitlines() if "ERROR" in line and "exit on SIGINT: " in line]
    assert len(errors) == 1 and "/bcmd/state" in errors[0], log[-3000:]
    assert f"exiting with status {EXIT_DATA_PATH_STUCK}" in errors[0], errors
    if hurried:
        assert "a second stop signal (SIGTERM, " in log, log[-3000:]
        assert "ended the wait before deactivate_timeout (10 s)" in log, log[-3000:]
    else:
        assert "did not return within deactivate_timeout (3 s)" in log, log[-3000:]
    events = held.events(tmp_path)
    assert events[-1] == "held" and not any(e.startswith("close") for e in events), events
    print(f"bringup, {signals}, call held: stop to exit {took:.2f} s")
