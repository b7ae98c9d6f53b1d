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
