"""``ros/stuck_exit.py``'s report (no ROS graph: the real processes are ``test_data_path_teardown.py``'s
SIGTERM tests): what the ERROR names when the spin had ended with an exception of its own before the data
path's thread was found stuck (that exception is named, not lost), and the exit status."""

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
