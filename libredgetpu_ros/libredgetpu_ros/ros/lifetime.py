"""A node process ends with the process that started it (``ros2 launch``, ``ros2 run``, a test harness).

Why: ``ros2 launch`` turns SIGINT into an orderly shutdown of its children, but on SIGTERM (what systemd,
docker stop, supervisors and ``kill`` send) it cancels its own task and exits at once, leaving every node it
started running, reparented to PID 1 (launch_service.py logs "using SIGTERM can result in orphaned
processes"; ros2/launch#666, open). No launch file can change that handler, so the node watches its own
parent: Linux's ``PR_SET_PDEATHSIG`` makes the kernel send this process SIGTERM when its parent exits, which
``spinning.SignalStop`` turns into the usual teardown (lifecycle ``shutdown``, exit 0).

A launcher that exits before the node arms this (during its imports, about a second) is caught when the
launcher said who it is: this package's launch files put their own PID in ``LIBREDGETPU_ROS_LAUNCH_PID``
(``ros/launching.py``), and a node that finds that process gone stops at once. Launchers that do not (``ros2
run``, a launch file of yours) leave that window open. Processes that should outlive their parent on purpose
(``node &`` in a script that exits): set ``LIBREDGETPU_ROS_STOP_WITH_PARENT=0``. No ROS imports.

Another program a launch file starts (rviz2) gets the same as a prefix, ``python -m
libredgetpu_ros.ros.lifetime PROGRAM ARGS...`` (:func:`main`): armed, then replaced by the program, which
keeps the death signal (execve preserves it for a program that is not set-user-ID).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

STOP_WITH_PARENT_VAR = "LIBREDGETPU_ROS_STOP_WITH_PARENT"
LAUNCH_PID_VAR = "LIBREDGETPU_ROS_LAUNCH_PID"  # the launch process's PID, set by this package's launch files
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def stop_with_parent(signum: int = signal.SIGTERM) -> bool:
    """Have the kernel send ``signum`` to this process when its parent exits; True if armed (Linux, not
    disabled by ``LIBREDGETPU_ROS_STOP_WITH_PARENT=0``). Install the handler of ``signum`` first."""
    if os.environ.get(STOP_WITH_PARENT_VAR, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None:
        return False
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    prctl.restype = ctypes.c_int
    armed = prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    launcher = os.environ.get(LAUNCH_PID_VAR, "")
    if armed and launcher.isdigit() and not _running(int(launcher)):
        os.kill(os.getpid(), signum)  # the launcher exited before we armed: no death signal will come
    return armed


def main(argv: list[str] | None = None) -> int:
    """``python -m libredgetpu_ros.ros.lifetime PROGRAM [ARGS...]``: :func:`stop_with_parent`, then exec
    PROGRAM (found on PATH) in this process; returns only on a usage error (2)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m libredgetpu_ros.ros.lifetime PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    stop_with_parent()
    os.execvp(argv[0], argv)
    return 2  # not reached: execvp replaces this process or raises OSError


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie waiting to be reaped has)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


if __name__ == "__main__":
    sys.exit(main())
