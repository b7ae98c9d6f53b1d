"""A state in flight on the data path while a supervisor deactivates and cleans the node up (control and
reservoir nodes, each its own process, over real localhost-only DDS).

The node runs with an instrumented MatMul runner (``_held_runner_node.py``: the CPU twin's arithmetic behind
our runner interface, which holds one ``run`` until released and frees its state on ``close()`` as a native
interpreter does). One state's ``run`` is held inside the engine while ``deactivate`` and ``cleanup`` are
requested back to back, as ``bringup`` does on Ctrl-C and a supervisor does to reconfigure. The held call is
released by the runner's ``close()`` (the engine closed under it: the defect) or, when the node waits for it,
by the test after ``RELEASE_AFTER_S``.

Required: both transitions succeed and the node ends ``unconfigured``; the engine is closed only after the
call in flight returned (no ``use-after-close``, ``close in_flight=0``); no exception escaped the data path
(nothing "crashed" in the node's log); the control node publishes the held state's command while it is still
active (the call completes before deactivate deactivates the publishers) and nothing after.

A call held past the node's ``deactivate_timeout`` (a runner stuck with no transfer timeout of its own): the
deactivate answers ``success: false`` within that bound (it hung forever before, with nothing logged), with a
WARN naming the callback once a second meanwhile, an ERROR log and ``/diagnostics`` ERROR saying so; the node
stays ``active``, its engine open under the call; once the call returns, deactivate and cleanup succeed and
close the engine after it.

SIGTERM to the node's ``main()`` with a call stuck: one wait of ``deactivate_timeout``, then an ERROR naming
the call and what is left open, exit status 3 (``stuck_exit.EXIT_DATA_PATH_STUCK``), no traceback, the engine
never closed; a call a failed deactivate gave up on already: not waited for again; a call returning within
the bound (past the old 5 s thread join): a clean teardown, exit 0.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from .._helpers import load_helper

HERE = Path(__file__).resolve().parent
supervision = load_helper(HERE / "_lifecycle_supervisor.py")
held = load_helper(HERE / "_held_runner_node.py")

pytestmark = [pytest.mark.ros, pytest.mark.timeout(120)]

WAIT_S = 30.0
RELEASE_AFTER_S = 2.0  # how long the transitions may take before the test releases the held call itself


def _hold_and_tear_down(sup: Any, folder: Path, publish: Any) -> tuple[Any, Any]:
    """Hold one state's engine call, request deactivate + cleanup, release; the two answers."""
    held.hold_next_call(sup, folder, publish)
    deactivate, cleanup = sup.answers_while_held(("deactivate", "cleanup"), (folder / "release").touch,
                                                 RELEASE_AFTER_S)
    return deactivate, cleanup


def _check_teardown(ros_env: Any, sup: Any, folder: Path, name: str, deactivate: Any, cleanup: Any) -> None:
    events = held.events(folder)
    assert "use-after-close" not in events, f"the in-flight call ran on a closed runner: {events}"
    closes = [i for i, e in enumerate(events) if e.startswith("close")]
    assert closes, f"the runner was never closed: {events}"
    assert events[closes[0]] == "close in_flight=0", f"the engine was closed under a call in flight: {events}"
    assert closes[0] > max(i for i, e in enumerate(events) if e == "run-end"), events
    assert deactivate.success and cleanup.success, (deactivate, cleanup)
    assert sup.state() == "unconfigured"
    log = (ros_env.work_dir / f"{name}.log").read_text()
    assert "crashed" not in log and "Traceback" not in log, log[-3000:]


def test_control_state_in_flight_survives_deactivate_and_cleanup(ros_env, tmp_path: Path) -> None:
    from std_msgs.msg import Float32MultiArray


    held.spawn(ros_env, tmp_path, "libredgetpu_ros.ros.control_node", "control_race",
           {"state_size": 4, "command_size": 2, "state_topic": "/race/state", "stale_timeout": 30.0})
    sup = supervision.LifecycleSupervisor(ros_env, "race_supervisor", "/control_race", WAIT_S)
    commands, states = held.control_wires(sup, "control_race", "/race/state")
    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for("the node's state subscription", lambda: states.get_subscription_count() > 0)

    def publish() -> None:
        states.publish(Float32MultiArray(data=[0.5, -0.25, 0.75, 0.1]))

    sup.wait_for("a first command", lambda: commands, every=publish)
    sup.spin_for(0.5)  # a state published twice while the subscription matched answers late
    before = len(commands)
    deactivate, cleanup = _hold_and_tear_down(sup, tmp_path, publish)
    _check_teardown(ros_env, sup, tmp_path, "control_race", deactivate, cleanup)
    # The held state was taken while active: its command goes out before deactivate completes. Nothing
    # comes after it (the subscription is gone, the publishers too).
    sup.wait_for("the held state's command", lambda: len(commands) > before)
    sup.spin_for(0.5)
    assert len(commands) == before + 1, f"{len(commands) - before} commands after the held state"
    # The node configures and serves again.
    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for("a command after reconfiguring", lambda: len(commands) > before + 1, every=publish)


def test_reservoir_state_in_flight_survives_deactivate_and_cleanup(ros_env, tmp_path: Path) -> None:
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float64MultiArray

    held.spawn(ros_env, tmp_path, "libredgetpu_ros.ros.reservoir.node", "reservoir_race",
           {"state_size": 2, "state_type": "float64_multi_array", "state_topic": "/race/joints"})
    sup = supervision.LifecycleSupervisor(ros_env, "race_supervisor", "/reservoir_race", WAIT_S)
    states = sup.node.create_publisher(Float64MultiArray, "/race/joints", QoSProfile(depth=10))
    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for("the node's state subscription", lambda: states.get_subscription_count() > 0)

    def publish() -> None:
        states.publish(Float64MultiArray(data=[0.5, -0.25]))

    sup.wait_for("a first reservoir step", lambda: "run-end" in held.events(tmp_path), every=publish)
    deactivate, cleanup = _hold_and_tear_down(sup, tmp_path, publish)
    _check_teardown(ros_env, sup, tmp_path, "reservoir_race", deactivate, cleanup)


STUCK_TIMEOUT_S = 2.5  # the node's deactivate_timeout in the stuck-runner tests: two WARNs, then the failure


def _diagnostic_messages(arrays: list[Any], node: str) -> list[tuple[int, str]]:
    return [(int.from_bytes(status.level, "little"), status.message) for array in arrays
            for status in array.status if status.name.startswith(f"/{node}: ")]


def _stuck_node(ros_env: Any, folder: Path, kind: str, name: str, *, expect_exit: bool = False,
                timeout: float = STUCK_TIMEOUT_S) -> tuple[Any, Any, Any, list[Any], Any]:
    """The ``kind`` node (reservoir or control) with a held-runner engine, configured with deactivate_timeout
    ``timeout``, active, one engine call done: (its process, the supervisor, a function
    publishing one state, the /diagnostics arrays recorded)."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import QoSProfile
    from std_msgs.msg import Float32MultiArray, Float64MultiArray

    if kind == "reservoir":
        proc = held.spawn(ros_env, folder, "libredgetpu_ros.ros.reservoir.node", name,
                      {"state_size": 2, "state_type": "float64_multi_array", "state_topic": "/stuck/state"},
                      expect_exit=expect_exit)
        msg = Float64MultiArray(data=[0.5, -0.25])
    else:
        proc = held.spawn(ros_env, folder, "libredgetpu_ros.ros.control_node", name,
                      {"state_size": 2, "command_size": 2, "state_topic": "/stuck/state",
                       "stale_timeout": 30.0}, expect_exit=expect_exit)
        msg = Float32MultiArray(data=[0.5, -0.25])
    sup = supervision.LifecycleSupervisor(ros_env, "stuck_supervisor", f"/{name}", WAIT_S)
    arrays: list[Any] = []
    sup.node.create_subscription(DiagnosticArray, "/diagnostics", arrays.append, QoSProfile(depth=100))
    states = sup.node.create_publisher(type(msg), "/stuck/state", QoSProfile(depth=10))
    # deactivate_timeout: a runtime parameter of every node, range-checked
    assert not sup.set_param("deactivate_timeout", 0.0).successful
    assert sup.set_param("deactivate_timeout", timeout).successful
    assert sup.transition("configure") and sup.transition("activate")
    sup.wait_for("the node's state subscription", lambda: states.get_subscription_count() > 0)
    held.first_call(sup, folder, lambda: states.publish(msg))
    return proc, sup, lambda: states.publish(msg), arrays


@pytest.mark.parametrize("kind", ["reservoir", "control"])
def test_a_stuck_call_fails_deactivate_within_its_timeout(ros_env, tmp_path: Path, kind: str) -> None:
    name = f"{kind}_stuck"
    _, sup, publish, arrays = _stuck_node(ros_env, tmp_path, kind, name)
    try:
        held.hold_next_call(sup, tmp_path, publish)
        started = time.monotonic()
        answer, = sup.request_async("deactivate")
        sup.wait_for(f"deactivate's answer within deactivate_timeout ({STUCK_TIMEOUT_S} s) of a stuck call",
                     answer.done, timeout=STUCK_TIMEOUT_S + 12.0)
        took = time.monotonic() - started
        assert not answer.result().success, "deactivate succeeded with the call still held"
        assert took >= STUCK_TIMEOUT_S - 0.1, f"answered after {took:.2f} s, before the bound"
        assert sup.state() == "active"
        events = held.events(tmp_path)
        assert not any(e.startswith("close") for e in events), f"closed under the held call: {events}"
        sup.spin_for(1.5)  # a periodic status or two while the call is still held
        log = (ros_env.work_dir / f"{name}.log").read_text()
        waits = [line for line in log.splitlines() if "WARN" in line and "deactivate: waiting" in line]
        assert len(waits) >= 2 and "Node._on_" in waits[0] and "/stuck/state" in waits[0], log[-3000:]
        assert "deactivate failed: the data-path callback on /stuck/state" in log, log[-3000:]
        statuses = _diagnostic_messages(arrays, name)
        assert any(level == 2 and message.startswith("deactivate failed") for level, message in statuses), \
            statuses
        assert any(level == 2 and "outlived a deactivate" in message for level, message in statuses), statuses
    finally:
        (tmp_path / "release").touch()
    sup.wait_for("the held call to return", lambda: "run-end" in held.events(tmp_path)[
        held.events(tmp_path).index("held"):])
    # Active and consistent: the next deactivate (the supervisor's retry) and cleanup succeed, the engine
    # closed after the call.
    assert sup.transition("deactivate") and sup.transition("cleanup") and sup.state() == "unconfigured"
    events = held.events(tmp_path)
    assert "use-after-close" not in events and events[-1] == "close in_flight=0", events
    log = (ros_env.work_dir / f"{name}.log").read_text()
    assert "crashed" not in log and "Traceback" not in log, log[-3000:]


# The stop by a signal: one wait of deactivate_timeout for a stuck call, then the ERROR (its 0.5 s
# acknowledgement) and the exit. A generous margin past that wait, short of the old exit's 5 s more (the data
# path's thread joined for 5 s, then the shutdown transition's own deactivate_timeout).
EXIT_MARGIN_S = 4.0
RETURNING_TIMEOUT_S = 8.0  # a call held past the old 5 s join that returns within this deactivate_timeout
RETURNS_AFTER_S = 6.0


def _sigterm(sup: Any, proc: Any, timeout: float) -> float:
    """SIGTERM the node; wait for its exit at most ``timeout`` + :data:`EXIT_MARGIN_S`: how long it took."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    sup.wait_for(f"the exit within {timeout + EXIT_MARGIN_S:g} s of SIGTERM (its wait: {timeout:g} s)",
                 lambda: proc.poll() is not None, timeout=timeout + EXIT_MARGIN_S)
    return time.monotonic() - started


def test_sigterm_ends_a_node_whose_call_is_stuck(ros_env, tmp_path: Path) -> None:
    """SIGTERM while the control node's engine call is stuck: one wait of deactivate_timeout for it (a WARN
    once a second), then an ERROR naming the call and what is left open (log and /diagnostics), and the exit
    with status 3 (``stuck_exit.EXIT_DATA_PATH_STUCK``), no traceback, the engine never closed under the call
    and the shutdown transition not run (it would wait for the call again). Before: the data-path thread was
    joined for 5 s, its RuntimeError's traceback and exit status 1 came after the shutdown's own wait of
    deactivate_timeout (under launch's defaults: SIGKILLed first)."""
    from libredgetpu_ros.ros.stuck_exit import EXIT_DATA_PATH_STUCK

    name = "control_sigterm"
    proc, sup, publish, arrays = _stuck_node(ros_env, tmp_path, "control", name, expect_exit=True)
    held.hold_next_call(sup, tmp_path, publish)
    took = _sigterm(sup, proc, STUCK_TIMEOUT_S)
    assert proc.returncode == EXIT_DATA_PATH_STUCK, proc.returncode
    events = held.events(tmp_path)
    assert events[-1] == "held" and not any(e.startswith("close") for e in events), events
    log = (ros_env.work_dir / f"{name}.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    waits = [line for line in log.splitlines() if "WARN" in line and "exit: waiting" in line]
    assert waits and "/stuck/state" in waits[0], log[-3000:]
    errors = [line for line in log.splitlines() if "ERROR" in line and "exit on SIGTERM: the data-path "
              "callback on /stuck/state" in line]
    assert len(errors) == 1, log[-3000:]
    assert f"did not return within deactivate_timeout ({STUCK_TIMEOUT_S:g} s)" in errors[0], errors
    assert f"exiting with status {EXIT_DATA_PATH_STUCK}" in errors[0] and "left open" in errors[0], errors
    assert "shutdown: waiting" not in log and "did not end" not in log, log[-3000:]  # no second wait
    statuses = _diagnostic_messages(arrays, name)
    assert any(level == 2 and message.startswith("exit on SIGTERM: the data-path callback")
               for level, message in statuses), statuses
    print(f"SIGTERM to exit with the call stuck: {took:.2f} s (deactivate_timeout {STUCK_TIMEOUT_S:g} s)")


def test_sigterm_waits_once_for_a_call_that_returns_within_its_timeout(ros_env, tmp_path: Path) -> None:
    """SIGTERM while the reservoir node's engine call is held, released after :data:`RETURNS_AFTER_S` (past
    the old 5 s join), within deactivate_timeout: the teardown is the usual one (the engine closed after the
    call returned, the shutdown transition run) and the process exits 0 without a traceback. Before: the 5 s
    join raised (exit status 1, a traceback) although the call returned within the node's bound."""
    name = "reservoir_sigterm"
    proc, sup, publish, _ = _stuck_node(ros_env, tmp_path, "reservoir", name, expect_exit=True,
                                        timeout=RETURNING_TIMEOUT_S)
    held.hold_next_call(sup, tmp_path, publish)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    sup.spin_for(RETURNS_AFTER_S)
    assert proc.poll() is None, "the node exited before its held call returned"
    (tmp_path / "release").touch()
    sup.wait_for("the node's exit once its held call returned", lambda: proc.poll() is not None,
                 timeout=RETURNING_TIMEOUT_S + EXIT_MARGIN_S - RETURNS_AFTER_S)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.returncode
    events = held.events(tmp_path)
    assert "use-after-close" not in events and events[-1] == "close in_flight=0", events
    log = (ros_env.work_dir / f"{name}.log").read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]
    assert "exit: waiting" in log, log[-3000:]
    print(f"SIGTERM to exit with the call returning after {RETURNS_AFTER_S:g} s: {took:.2f} s")


def test_sigterm_after_a_failed_deactivate_does_not_wait_again(ros_env, tmp_path: Path) -> None:
    """A deactivate gave up on the stuck call (the node stays active, the call still runs), then SIGTERM: the
    call already known stuck is not waited for again (no ``exit: waiting`` WARN, the exit within
    :data:`EXIT_MARGIN_S`), the ERROR says so, status 3, no traceback, the engine never closed. Before: the
    5 s thread join, then the shutdown's wait of deactivate_timeout again, a traceback and status 1."""
    from libredgetpu_ros.ros.stuck_exit import EXIT_DATA_PATH_STUCK

    name = "reservoir_known_stuck"
    proc, sup, publish, _ = _stuck_node(ros_env, tmp_path, "reservoir", name, expect_exit=True)
    held.hold_next_call(sup, tmp_path, publish)
    assert not sup.transition("deactivate"), "deactivate succeeded with the call still held"
    took = _sigterm(sup, proc, 0.0)
    assert proc.returncode == EXIT_DATA_PATH_STUCK, proc.returncode
    events = held.events(tmp_path)
    assert events[-1] == "held" and not any(e.startswith("close") for e in events), events
    log = (ros_env.work_dir / f"{name}.log").read_text()
    assert "Traceback" not in log and "exit: waiting" not in log, log[-3000:]
    errors = [line for line in log.splitlines() if "ERROR" in line and "exit on SIGTERM" in line]
    assert len(errors) == 1 and "given up on by deactivate before" in errors[0], log[-3000:]
    print(f"SIGTERM to exit with the call known stuck: {took:.2f} s")
