"""What ``process-bag``'s helper threads (``bag_reader``'s reader, ``bag_writer``'s writer) share: how they
step back from the pipeline's thread for a core."""

from __future__ import annotations

import contextlib
import os
import threading

# The reader and writer threads run this much nicer than the process (Linux: per thread; 0: as nice), so the
# pipeline's thread and the inference library's workers (LiteRT's) win a core they and a helper want at the
# same moment (less run-queue wait for the loop's thread). Not more: a helper preempted while it holds the
# GIL leaves the loop's thread asleep until the helper gets a core back, which a very nice thread rarely
# does on a busy machine. The helpers need ~7% of the loop's CPU; nice 5 still leaves them ~25% of a core
# shared with one nice-0 thread. Measured at 0, 5, 10 and 19: docs/replay_testing.md.
HELPER_NICE = 5


def yield_to_pipeline() -> None:
    """Make the calling thread (a reader or writer thread) :data:`HELPER_NICE` nicer than it is (raising
    one's nice value needs no privilege; where the system refuses, the thread stays as it is)."""
    if HELPER_NICE and hasattr(os, "setpriority"):
        tid = threading.get_native_id()
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + HELPER_NICE))
