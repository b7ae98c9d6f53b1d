"""A node process ends with the process that started it (``ros2 launch``, ``ros2 run``, a test harness).

Why: ``ros2 launch`` turns SIGINT into an orderly shutdown of its children, but on SIGTERM (what systemd,
docker stop, supervisors and ``kill`` send) it cancels its own task and exits at once, leaving every node it
started running, reparented to PID 1 (launch_service.py logs "using SIGTERM can result in orphaned
processes"; ros2/launch#666, open). No launch file can change that handler, so the node watches its own
parent: Linux's ``PR_SET_PDEATHSIG`` makes the kernel send this process SIGTERM when its parent exits, which
``spinning.SignalStop`` turns into the usual teardown (lifecycle ``shutdown``, exit 0).

Not covered: a parent that exits in the instant between the node's start and :func:`stop_with_parent`
(module imports, under a second), and processes that should outlive their parent on purpose (``node &``
in a script that exits): set ``LIBREDGETPU_ROS_STOP_WITH_PARENT=0`` for those. No ROS imports.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

STOP_WITH_PARENT_VAR = "LIBREDGETPU_ROS_STOP_WITH_PARENT"
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
    return prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
