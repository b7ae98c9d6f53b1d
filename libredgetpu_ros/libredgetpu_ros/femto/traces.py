"""Replay event traces in the conformance fixtures' JSON format through a :class:`SequenceEngine`.

A trace is ``{"name", "events": [{"send": name | [names]}, {"recv": name | [names] | null},
{"reset": true}], "mode": "stop_at_first_error" | "continue_after_error"}``. The result has the same fields
femtorun's harness recorded: ``outcome``, ``error`` (``event_index``, ``type``, ``message``) and ``steps``
(``index``, ``event``, ``result``, and for recv ``returned`` and ``ready``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from libredgetpu_ros import textdata
from libredgetpu_ros.errors import IOSpecError, SpuSequenceError, TextDataError
from libredgetpu_ros.femto.engine import SequenceEngine

MAX_TRACE_FILE_BYTES = 16 * 1024 * 1024
MAX_EVENTS = 1_000_000
MAX_TRACE_DEPTH = 16  # traces nest 6 levels ({traces: [{events: [{send: [...]}]}]})


def load_traces(path: str | Path) -> list[dict]:
    """The ``traces`` list of a traces JSON file (or a bare list); errors name the file and field."""
    p = Path(path)
    try:
        doc = textdata.load_json_file(p, "trace file", max_bytes=MAX_TRACE_FILE_BYTES,
                                      max_depth=MAX_TRACE_DEPTH)
    except TextDataError as exc:
        raise IOSpecError(str(exc), kind=exc.kind, key="trace", value=str(p)) from None
    p = textdata.clip(p)
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
        raise IOSpecError(f"event {index}: expected one of {{send|recv|reset: ...}}, got "
                          f"{textdata.clip_repr(event)}",
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
        raise IOSpecError(f"event {index}: unknown event kind {textdata.clip_repr(kind)} (send, recv or "
                          "reset)",
                          key=f"events[{index}]", value=kind)
    return step


def replay_trace(engine: SequenceEngine, trace: dict) -> dict:
    """Reset the engine, run the trace's events; the result mirrors the fixtures' trace records."""
    mode = trace.get("mode", "stop_at_first_error")
    if mode not in ("stop_at_first_error", "continue_after_error"):
        raise IOSpecError(f"trace {textdata.clip_repr(trace.get('name'))}: unknown mode "
                          f"{textdata.clip_repr(mode)}", key="mode", value=mode)
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
