"""The real trainer node whose Team Tensor session can hold one batch hand-over in flight, for the teardown
test (run as a script).

``python _held_trainer_node.py DIR --ros-args ...`` runs ``ros/trainer/node.py``'s ``main()`` (unmodified)
with ``TrainingSession.submit`` (what the samples callback calls when a batch is full) and ``stop`` (what
cleanup calls) instrumented around the real ones:

- the first ``submit`` that starts after the file ``DIR/arm`` exists is held until ``DIR/release`` exists or
  ``stop()`` is called (then it goes on, as a call would whose session was stopped under it);
- a ``submit`` that goes on after ``stop()`` is recorded as ``submit-after-stop`` and refused with
  ``RuntimeError`` (the real one would schedule on a closed event loop);
- ``DIR/events`` gets one line per event: ``held``, ``submit-end``, ``stop in_flight=<n>``,
  ``submit-after-stop``.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

HOLD_LIMIT_S = 60.0  # a held call never outlives a test


def instrument(folder: Path) -> None:
    from libredgetpu_ros.ros.trainer.session import TrainingSession

    submit, stop = TrainingSession.submit, TrainingSession.stop
    lock = threading.Lock()
    # a stopped session is marked on itself (a configure after cleanup opens a new one, which is not)
    stopped = "_held_stopped"
    state = {"in_flight": 0, "held_once": False}

    def event(text: str) -> None:
        with (folder / "events").open("a") as f:
            f.write(text + "\n")

    def held_submit(self: Any, inputs: Any, targets: Any) -> None:
        with lock:
            state["in_flight"] += 1
            hold = not state["held_once"] and (folder / "arm").exists()
            state["held_once"] |= hold
        try:
            if hold:
                event("held")
                deadline = time.monotonic() + HOLD_LIMIT_S
                while not (folder / "release").exists() and not getattr(self, stopped, False):
                    if time.monotonic() > deadline:
                        raise RuntimeError("held submit never released")
                    time.sleep(0.005)
            if getattr(self, stopped, False):
                event("submit-after-stop")
                raise RuntimeError("submit on a stopped session")
            submit(self, inputs, targets)
        finally:
            with lock:
                state["in_flight"] -= 1
            event("submit-end")

    def recorded_stop(self: Any) -> None:
        with lock:
            in_flight = state["in_flight"]
        event(f"stop in_flight={in_flight}")
        setattr(self, stopped, True)
        stop(self)

    TrainingSession.submit = held_submit  # type: ignore[method-assign]
    TrainingSession.stop = recorded_stop  # type: ignore[method-assign]


def main() -> int:
    instrument(Path(sys.argv[1]))
    from libredgetpu_ros.ros.trainer.node import main as trainer_main

    return trainer_main([sys.argv[0], *sys.argv[2:]])


if __name__ == "__main__":
    sys.exit(main())
