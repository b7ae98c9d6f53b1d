"""SIGTERM handled like Ctrl-C by the commands that write bags (not a subcommand: no HELP).

A bag is complete only once its writer closes (rosbags writes the MCAP summary and ``metadata.yaml``
last). Python turns SIGINT into ``KeyboardInterrupt``, which unwinds through the writers' ``finally`` and
closes them; SIGTERM (``kill``, systemd, ``docker stop``) would end the process on the spot. Inside
:func:`sigterm_as_interrupt` it raises ``KeyboardInterrupt`` too, so the bag written so far is closed
and readable, and ``cli.main`` exits 130 as for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises ``KeyboardInterrupt`` in the main thread while inside; the previous handler after."""
    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
