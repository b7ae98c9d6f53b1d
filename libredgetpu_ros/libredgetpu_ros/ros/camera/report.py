"""The perception node's /diagnostics status and per-frame ``~/timing`` messages (built, not published)."""

from __future__ import annotations

from typing import Any

from diagnostic_msgs.msg import DiagnosticArray

from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.perception.intake import Frame, FrameStats


def status_array(node_name: str, stamp: Any, stats: FrameStats, describe: dict[str, Any], task: str,
                 model: str, input_topic: str) -> DiagnosticArray:
    """One period's status: rates, counters, mean stage times; the level says what needs attention."""
    s = stats
    n, stages, latency, latency_max = s.take_period()
    values: dict[str, object] = {
        "task": task,
        "backend": describe.get("backend", ""),
        "device": describe.get("device", ""),
        "model": model,
        "input_topic": input_topic,
        "fps_in": s.rate_in.rate(),
        "fps_out": s.rate_out.rate(),
        "frames_received": s.received,
        "frames_processed": s.processed,
        "frames_dropped": s.dropped,
        "frames_lost": s.lost,
        "frames_lost_transport": s.lost_transport,
        "errors": s.errors,
        "bad_input": s.bad_input.total(),
    }
    values.update({f"bad_input_{cause}": count for cause, count in s.bad_input.items()})
    values.update({f"{stage}_ms": ms for stage, ms in sorted(stages.items())})
    values.update({"node_latency_ms": latency, "node_latency_max_ms": latency_max})
    if s.errors:
        level, message = diagnostics.ERROR, f"processing errors: {s.last_error}"
    elif s.bad_input.total():
        level, message = diagnostics.WARN, f"{s.bad_input.total()} bad input frames"
    elif s.lost_transport:
        level, message = diagnostics.WARN, f"{s.lost_transport} frames lost in transport"
    elif n == 0:
        level, message = diagnostics.WARN, "no input"
    else:
        level, message = diagnostics.OK, f"{s.rate_out.rate():.1f} fps"
    hardware = str(describe.get("device") or describe.get("backend") or "cpu")
    st = diagnostics.status(f"{node_name}: perception", hardware, level, message, values)
    return diagnostics.array(stamp, [st])


def timing_array(node_name: str, task: str, frame: Frame, skipped: int, idle_ns: int,
                 timings: dict[str, float], started: float, converted: float, processed: float,
                 published: float) -> DiagnosticArray:
    """Where one frame's time went, stamped with the frame's header (to pair it with the results).
    ``idle_ns``: wall ns the previous frame finished."""
    values: dict[str, object] = {"skipped": skipped}  # frames dropped for this one
    queued_ns = 0
    if frame.rmw_ns:
        # In the reader until the previous frame was done (by design when the model is slower than the
        # camera), then the executor's wake-up, take and deserialization.
        queued_ns = max(0, idle_ns - frame.rmw_ns)
        values["take_ms"] = (frame.callback_ns - frame.rmw_ns - queued_ns) * 1e-6
        if frame.source_ns:
            values["dds_in_ms"] = (frame.rmw_ns - frame.source_ns) * 1e-6  # publisher -> DDS reader
    values.update({
        "queued_ms": queued_ns * 1e-6,
        "wait_ms": (started - frame.received) * 1e3,  # callback -> processing (newer frames taken)
        "convert_ms": (converted - started) * 1e3,
        **{f"{stage}_ms": ms for stage, ms in timings.items()},
        "pipeline_ms": (processed - converted) * 1e3,
        "publish_ms": (published - processed) * 1e3,  # result messages built and published
        "node_ms": (published - frame.received) * 1e3,
    })
    st = diagnostics.status(f"{node_name}: frame timing", task, diagnostics.OK, "", values)
    msg = diagnostics.array(frame.msg.header.stamp, [st])
    msg.header.frame_id = frame.msg.header.frame_id
    return msg
