"""Replay event traces in the conformance fixtures' JSON format through a :class:`SequenceEngine`.

A trace is ``{"name", "events": [{"send": name | [names]}, {"recv": name | [names] | null},
{"reset": true}], "mode": "stop_at_first_error" | "continue_after_error"}``. The result has the same fields
femtorun's harness recorded: ``outcome``, ``error`` (``event_index``, ``type``, ``message``) and ``steps``
(``index``, ``event``, ``result``, and for recv ``returned`` and ``ready``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from libredgetpu_ros.errors import IOSpecError, SpuSequenceError
from libredgetpu_ros.femto.engine import SequenceEngine

MAX_TRACE_FILE_BYTES = 16 * 1024 * 1024
MAX_EVENTS = 1_000_000


def load_traces(path: str | Path) -> list[dict]:
    """The ``traces`` list of a traces JSON file (or a bare list); errors name the file and field."""
    p = Path(path)
    if not p.is_file():
        raise IOSpecError(f"trace file {p} does not exist or is not a file", kind="FileNotFoundError",
                          key="trace", value=str(p))
    if p.stat().st_size > MAX_TRACE_FILE_BYTES:
        raise IOSpecError(f"trace file {p} is larger than {MAX_TRACE_FILE_BYTES} bytes", key="trace")
    try:
        doc = json.loads(p.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise IOSpecError(f"trace file {p}: not JSON: {exc}", key="trace") from None
    traces = doc.get("traces") if isinstance(doc, dict) else doc
    if not isinstance(traces, list):
        raise IOSpecError(f"trace file {p}: expected a list or an object with a 'traces' list", key="traces",
                          value=type(traces).__name__)
    for i, t in enumerate(traces):
        events = t.get("events") if isinstance(t, dict) else None
        if not isinstance(events, list) or len(events) > MAX_EVENTS:
            raise IOSpecError(f"trace file {p}: traces[{i}].events must be a list of at most {MAX_EVENTS}",
                              key=f"traces[{i}].events", value=type(events).__name__)
    return traces


def _error(index: int, exc: SpuSequenceError) -> dict:
    return {"event_index": index, "type": exc.kind, "message": exc.femtorun_message, "rule": exc.rule,
            "detail": str(exc)}


def _apply(engine: SequenceEngine, event: Any, index: int) -> dict:
    """Run one event; returns the step record (raises SpuSequenceError / IOSpecError)."""
    if not isinstance(event, dict) or len(event) != 1:
        raise IOSpecError(f"event {index}: expected one of {{send|recv|reset: ...}}, got {event!r}",
                          key=f"events[{index}]", value=event)
    (kind, arg), = event.items()
    step: dict[str, Any] = {"index": index, "event": event}
    if kind == "send":
        engine.send_list(arg if isinstance(arg, list) else [arg])
        step["result"] = "ok"
    elif kind == "recv":
        returned = engine.recv()
        named = [] if arg is None else arg if isinstance(arg, list) else [arg]
        step.update(result="ok", returned=returned, ready=all(n in returned for n in named))
    elif kind == "reset":
        engine.reset()
        step["result"] = "ok"
    else:
        raise IOSpecError(f"event {index}: unknown event kind {kind!r} (send, recv or reset)",
                          key=f"events[{index}]", value=kind)
    return step


def replay_trace(engine: SequenceEngine, trace: dict) -> dict:
    """Reset the engine, run the trace's events; the result mirrors the fixtures' trace records."""
    mode = trace.get("mode", "stop_at_first_error")
    if mode not in ("stop_at_first_error", "continue_after_error"):
        raise IOSpecError(f"trace {trace.get('name')!r}: unknown mode {mode!r}", key="mode", value=mode)
    engine.reset()
    steps: list[dict] = []
    first_error: dict | None = None
    for index, event in enumerate(trace["events"]):
        try:
            steps.append(_apply(engine, event, index))
        except SpuSequenceError as exc:
            err = _error(index, exc)
            steps.append({"index": index, "event": event, "result": "error", "error": err})
            first_error = first_error or err
            if mode == "stop_at_first_error":
                break
    recvs = [s for s in steps if "ready" in s]
    return {"name": trace.get("name"), "mode": mode, "outcome": "error" if first_error else "accepted",
            "error": first_error, "all_named_recvs_ready": all(s["ready"] for s in recvs), "steps": steps}
