"""``ros/stuck_exit.py``'s report (no ROS graph: the real processes are ``test_data_path_teardown.py``'s
SIGTERM tests and ``test_launch_stuck_stop.py``): what the ERROR names when the spin had ended with an
exception of its own before the data path's thread was found stuck (that exception is named, not lost), and
the exit status; a second stop signal hurrying the stop (``ros/signal_stop.py``) and ending the wait for a
stuck callback (``ros/data_guard.py``)."""

from __future__ import annotations

import pytest


class _Node:
    def __init__(self) -> None:
        self.reports: list[str] = []

    def report_stuck(self, message: str) -> None:
        self.reports.append(message)


def test_the_exception_the_spin_ended_with_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from libredgetpu_ros.ros import stuck_exit
    from libredgetpu_ros.ros.spinning import CompanionThreadsStuck

    codes: list[int] = []
    monkeypatch.setattr(stuck_exit.os, "_exit", codes.append)
    node = _Node()
    try:
        try:
            raise ValueError("a main-executor callback failed")
        finally:
            raise CompanionThreadsStuck(["spin_n_group0"], "the data-path callback on /s (f) did not return")
    except CompanionThreadsStuck as exc:
        stuck_exit.exit_data_path_stuck(node, exc, 15)
    assert codes == [stuck_exit.EXIT_DATA_PATH_STUCK] == [3]
    message, = node.reports
    expected = ("exit on SIGTERM: the data-path callback on /s (f) did not return (the spin had ended with "
                "ValueError: a main-executor callback failed); exiting with status 3")
    assert message.startswith(expected), message


def test_threads_that_did_not_end_without_a_known_call(monkeypatch: pytest.MonkeyPatch) -> None:
    from libredgetpu_ros.ros import stuck_exit
    from libredgetpu_ros.ros.spinning import CompanionThreadsStuck

    codes: list[int] = []
    monkeypatch.setattr(stuck_exit.os, "_exit", codes.append)
    node = _Node()
    stuck_exit.exit_data_path_stuck(node, CompanionThreadsStuck(["spin_n_group0"], None), None)
    assert codes == [3]
    expected = ("exit on a stop request: executor threads spin_n_group0 did not end: they did not end within "
                "5 s of their shutdown; exiting with status 3")
    assert node.reports[0].startswith(expected), node.reports


def test_a_second_stop_signal_hurries_the_stop_copies_of_the_first_do_not() -> None:
    """In-process (no ROS graph): SIGINT twice at once (a terminal's SIGINT to the process group and launch's
    own) is one stop request; then a SIGTERM (launch's escalation), even after ``disconnect`` (the teardown),
    hurries the stop: ``data_guard.STOP_HURRIED`` names it. A new ``SignalStop`` starts unhurried; there a
    second SIGINT ``REPEAT_S`` after the first (a second Ctrl-C) hurries it."""
    import os
    import signal
    import time

    from libredgetpu_ros.ros.data_guard import STOP_HURRIED
    from libredgetpu_ros.ros.signal_stop import REPEAT_S, SignalStop

    def wait(predicate) -> bool:
        deadline = time.monotonic() + 5.0
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.01)
        return bool(predicate())

    stop = SignalStop()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        assert wait(stop.requested.done) and stop.requested.result() == signal.SIGINT
        time.sleep(0.2)
        assert STOP_HURRIED.reason == "", STOP_HURRIED.reason
        stop.disconnect()
        os.kill(os.getpid(), signal.SIGTERM)
        assert wait(lambda: STOP_HURRIED.reason), "SIGTERM after SIGINT did not hurry the stop"
        assert STOP_HURRIED.reason.startswith("a second stop signal (SIGTERM, "), STOP_HURRIED.reason
        assert STOP_HURRIED.reason.endswith(" s after SIGINT)"), STOP_HURRIED.reason
    finally:
        stop.close()
    stop = SignalStop()
    try:
        assert STOP_HURRIED.reason == ""
        os.kill(os.getpid(), signal.SIGINT)
        assert wait(stop.requested.done)
        time.sleep(REPEAT_S)
        os.kill(os.getpid(), signal.SIGINT)
        assert wait(lambda: STOP_HURRIED.reason), "a second Ctrl-C did not hurry the stop"
        assert STOP_HURRIED.reason.startswith("a second stop signal (SIGINT, "), STOP_HURRIED.reason
    finally:
        stop.close()
        STOP_HURRIED.clear()


def test_a_hurried_stop_ends_the_wait_for_a_stuck_callback() -> None:
    """``DataPathGuard.settle`` waiting (a 60 s bound) for a callback that is held until the wait returns:
    the stop hurried meanwhile ends the wait with that callback given up on, and the ERROR's wording says
    what ended it (before: the wait ran its whole ``deactivate_timeout`` whatever came)."""
    import threading

    from libredgetpu_ros.ros.data_guard import STOP_HURRIED, DataPathGuard

    class Logger:
        def warning(self, text: str) -> None:
            pass

    guard = DataPathGuard(Logger(), lambda: False)
    entered, release = threading.Event(), threading.Event()
    callback = guard.wrap(lambda msg: (entered.set(), release.wait(120)), "on /s (held)")
    guard.turn_on()
    held = threading.Thread(target=callback, args=(None,), daemon=True)
    held.start()
    assert entered.wait(5)
    reason = "a second stop signal (SIGTERM, 5.0 s after SIGINT)"
    hurry = threading.Timer(0.3, STOP_HURRIED.hurry, args=(reason,))
    hurry.start()
    try:
        stuck = guard.settle(60.0, "exit")
        still_held = not release.is_set()
    finally:
        release.set()
        hurry.cancel()
        STOP_HURRIED.clear()
    held.join(5)
    assert still_held and stuck is not None and stuck.what == "on /s (held)" and guard.gave_up is stuck
    bound = guard.bound(60.0)
    assert bound.endswith(" s: a second stop signal (SIGTERM, 5.0 s after SIGINT) ended the wait before "
                          "deactivate_timeout (60 s)"), bound


def test_signals_other_than_sigint_and_sigterm_neither_stop_nor_hurry() -> None:
    """CPython writes a byte to the wake-up fd for every signal with a Python handler, not only SIGINT /
    SIGTERM (pytest-timeout's SIGALRM, asyncio's SIGCHLD): such a signal is not a stop request, nor a second
    one. Before, a SIGUSR1 with a handler installed stopped the process, and after a SIGINT hurried its stop
    ("a second stop signal (SIGUSR1, ...)": a clean stop turned into exit 3)."""
    import os
    import signal
    import time

    from libredgetpu_ros.ros.data_guard import STOP_HURRIED
    from libredgetpu_ros.ros.signal_stop import SignalStop

    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    stop = SignalStop()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 5.0
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # the watcher has long read the byte
        assert seen and not stop.requested.done(), "SIGUSR1 taken for a stop request"
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 5.0
        while not stop.requested.done() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stop.requested.done() and stop.requested.result() == signal.SIGINT
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 5.0
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        assert len(seen) == 2 and STOP_HURRIED.reason == "", STOP_HURRIED.reason
    finally:
        stop.close()
        signal.signal(signal.SIGUSR1, previous)
        STOP_HURRIED.clear()


def test_close_with_the_wake_up_pipe_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """``SignalStop.close`` writes its wake-up byte to a non-blocking pipe: when the pipe is full (a burst of
    signals the watcher has not read yet) the write raises ``BlockingIOError``, and the watcher wakes on the
    bytes already there. The write here puts its byte in, then raises as a full pipe does (no lock ordering
    fills the real pipe before close() while the watcher drains it): close() must go on, not raise."""
    import os
    import signal

    from libredgetpu_ros.ros import signal_stop

    class FullPipeOs:
        def __getattr__(self, name: str):
            return getattr(os, name)

        @staticmethod
        def write(fd: int, data: bytes) -> int:
            os.write(fd, data)
            raise BlockingIOError(11, "Resource temporarily unavailable")

    before = signal.getsignal(signal.SIGINT)
    stop = signal_stop.SignalStop()
    monkeypatch.setattr(signal_stop, "os", FullPipeOs())
    stop.close()
    assert signal.getsignal(signal.SIGINT) is before


def test_a_hurried_stop_still_waits_for_a_normal_call_in_flight() -> None:
    """Once the stop is hurried a wait still lasts ``HURRY_GRACE_S`` from its start: a 200 ms callback (a
    frame) in flight returns within it and the wait ends cleanly, with nothing given up on. Before, the wait
    gave it one 50 ms poll and reported it stuck (then "returned after exit gave up waiting"): in a bringup
    with one node really stuck, every later node's deactivate gave up on its normal frame; a node's main hit
    by launch's SIGTERM during a long transition exited 3 with a false ERROR."""
    import threading

    from libredgetpu_ros.ros.data_guard import STOP_HURRIED, DataPathGuard

    warnings: list[str] = []

    class Logger:
        def warning(self, text: str) -> None:
            warnings.append(text)

    guard = DataPathGuard(Logger(), lambda: False)
    entered = threading.Event()
    # 0.1 s: the code before the grace gave up after one 50 ms poll; 0.4 s of room for a loaded machine
    callback = guard.wrap(lambda msg: (entered.set(), threading.Event().wait(0.1)), "on /s (a frame)")
    guard.turn_on()
    frame = threading.Thread(target=callback, args=(None,), daemon=True)
    STOP_HURRIED.hurry("a second stop signal (SIGTERM, 5.0 s after SIGINT)")
    try:
        frame.start()
        assert entered.wait(5)
        stuck = guard.settle(10.0, "exit")
    finally:
        STOP_HURRIED.clear()
    frame.join(5)
    assert stuck is None and guard.gave_up is None, stuck
    assert not warnings, warnings  # not even the once-a-second "still waiting" WARN


def test_the_graces_of_one_hurried_stop_share_one_budget() -> None:
    """Each wait gets HURRY_GRACE_S from its own start, but none lasts past HURRY_BUDGET_S after the hurry:
    a bringup whose nodes all wait on one wedged device does not add a grace per node past launch's
    SIGKILL (clock values set, no sleeping)."""
    import time

    from libredgetpu_ros.ros.data_guard import HURRY_BUDGET_S, HURRY_GRACE_S, STOP_HURRIED

    assert HURRY_GRACE_S < HURRY_BUDGET_S
    try:
        now = time.monotonic()
        assert not STOP_HURRIED.ends(now, 10.0)  # not hurried
        STOP_HURRIED.hurry("a second stop signal (SIGTERM, 5.0 s after SIGINT)")
        assert not STOP_HURRIED.ends(time.monotonic(), 10.0)  # a wait starting now has its grace
        assert STOP_HURRIED.ends(time.monotonic() - HURRY_GRACE_S, 10.0)  # its grace is over
        STOP_HURRIED.hurried_at -= HURRY_BUDGET_S  # the hurry came a budget ago
        assert STOP_HURRIED.ends(time.monotonic(), 10.0)  # a wait starting now ends at once
    finally:
        STOP_HURRIED.clear()


def test_a_hurried_stop_ends_the_wait_for_a_stuck_reservoir_fit() -> None:
    """``ReservoirNode.close_processor`` with a fit that ignores its cancel (stuck reading a bag on a hung
    mount: a thread held on an event) and the stop hurried: the wait ends after the grace, not after the
    whole ``deactivate_timeout`` (before: joined for all of it, racing launch's SIGKILL), the report says
    what ended it, and the engine is left open for the fit (never closed under it)."""
    import threading
    from types import SimpleNamespace

    from libredgetpu_ros.ros.data_guard import STOP_HURRIED
    from libredgetpu_ros.ros.reservoir.fit_run import FitRun
    from libredgetpu_ros.ros.reservoir.node import ReservoirNode
    from libredgetpu_ros.ros.services import OffExecutor

    hung = threading.Event()
    fitting = OffExecutor("reservoir_fit")
    fitting._thread = threading.Thread(target=hung.wait, args=(60,), daemon=True)  # as run() starts it
    fitting._thread.start()
    closed: list[str] = []
    run = FitRun()
    reports: list[str] = []
    node = SimpleNamespace(_pred_pub=object(), _rc=SimpleNamespace(engine=SimpleNamespace(
                               close=lambda: closed.append("engine"))),
                           _fit_run=run, _fitting=fitting, transition_name=lambda: "shutdown",
                           deactivate_timeout=lambda: 8.0, report_stuck=reports.append)
    STOP_HURRIED.hurry("a second stop signal (SIGTERM, 5.0 s after SIGINT)")
    try:
        ReservoirNode.close_processor(node)
        still_running = fitting.busy()
    finally:
        STOP_HURRIED.clear()
        hung.set()
        fitting.join(5)
    assert still_running and run.cancelled_by == "shutdown"
    assert closed == [] and run.finished() is not None, "the engine was closed under the running fit"
    report, = reports
    assert report.startswith("shutdown: the running ~/fit did not stop within "), report
    reason = "a second stop signal (SIGTERM, 5.0 s after SIGINT)"
    assert f"{reason} ended the wait before deactivate_timeout (8 s)" in report, report


def test_bringup_stop_logs_every_error_it_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Bringup.stop`` with node A's call stuck (``CompanionThreadsStuck``, raised: ``run()`` exits with
    status 3 through ``os._exit``, no traceback) and node B's deactivate raising: B's error is logged with its
    traceback before the raise. Before, it was dropped unseen."""
    from libredgetpu_ros.ros.bringup import Bringup
    from libredgetpu_ros.ros.spinning import CompanionThreadsStuck

    class Node:
        def __init__(self, name: str) -> None:
            self.name = name

        def get_fully_qualified_name(self) -> str:
            return self.name

    def trigger_deactivate(name: str) -> None:
        raise RuntimeError(f"{name}: the publisher went away")

    def bring_down(node: Node) -> None:
        if node.name == "/a":
            raise CompanionThreadsStuck(["spin_a_group0"], "the data-path callback on /s (f) did not return")
        trigger_deactivate(node.name)

    lines: list[str] = []
    bringup = Bringup([], log=lines.append)
    bringup.nodes = [Node("/a"), Node("/b")]
    monkeypatch.setattr(bringup, "_bring_down", bring_down)
    with pytest.raises(CompanionThreadsStuck):
        bringup.stop()
    assert bringup.nodes == []
    logged, = lines
    assert logged.startswith("/b: bring-down failed"), logged
    assert "Traceback (most recent call last)" in logged and "in trigger_deactivate" in logged, logged
    assert logged.endswith("RuntimeError: /b: the publisher went away"), logged
