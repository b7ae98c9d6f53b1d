"""A lock held by another thread, as a stuck frame holds it, while a main-executor handler runs (used by
``test_frame_busy_services.py`` and the SPU node's tests; loaded by path: ``load_helper``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

WAIT_S = 15.0  # the bound (1 s) with room on a loaded machine; an unbounded wait never answers


def answer_while_held(lock: Any, call: Callable[[], Any]) -> Any:
    """``call()`` run on its own thread while another thread holds ``lock``; its result, or a failure when
    it did not return within WAIT_S (the lock is released before failing, so the call ends)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(WAIT_S * 2)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(WAIT_S)
    answers: list[Any] = []
    caller = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    try:
        caller.start()
        caller.join(WAIT_S)
        assert answers, f"the handler did not answer within {WAIT_S:g} s with the lock held: blocked"
        return answers[0]
    finally:
        release.set()
        holder.join(WAIT_S)
        caller.join(WAIT_S)
