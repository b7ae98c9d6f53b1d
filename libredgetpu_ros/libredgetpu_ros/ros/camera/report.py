"""A camera node's /diagnostics status (its level, message and values) and per-frame ``~/timing`` messages
(built here, published by the node)."""

from __future__ import annotations

from collections.abc import Mapping

from diagnostic_msgs.msg import DiagnosticArray

from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.camera.intake import Frame, FrameStats


def status(stats: FrameStats, head: Mapping[str, object], image: Mapping[str, object], warnings: list[str],
           active: bool, *, silent: bool = False) -> tuple[int, str, dict[str, object]]:
    """One period's (level, message, values): the node's own ``head`` values, the ``image`` subscription's,
    rates, counters, mean stage times. Level: ERROR on a processing error; else WARN naming every
    ``warnings`` entry and the intake's own (bad input, transport loss, no input: ``silent``, no frame for
    ``input_timeout`` s); else OK with the output rate, or ``inactive``. (A period without a result is not
    "no input": a camera or model slower than ``diagnostics_period`` flapped between OK and WARN so.)"""
    s = stats
    _, stages, latency, latency_max = s.take_period()
    values: dict[str, object] = dict(head)
    values.update(image)
    values.update({
        "fps_in": s.rate_in.rate(),
        "fps_out": s.rate_out.rate(),
        "frames_received": s.received,
        "frames_processed": s.processed,
        "frames_dropped": s.dropped,
        "frames_lost": s.lost,
        "frames_lost_transport": s.lost_transport,
        "errors": s.errors,
        "bad_input": s.bad_input.total(),
    })
    values.update({f"bad_input_{cause}": count for cause, count in s.bad_input.items()})
    values.update({f"{stage}_ms": ms for stage, ms in sorted(stages.items())})
    values.update({"node_latency_ms": latency, "node_latency_max_ms": latency_max})
    warn = list(warnings)
    if s.bad_input.total():
        warn.append(f"{s.bad_input.total()} bad input frames")
    if s.lost_transport:
        warn.append(f"{s.lost_transport} frames lost in transport")
    if silent:  # inactive: not subscribed, no frame is expected
        warn.append("no input")
    if s.errors:
        return diagnostics.ERROR, f"processing errors: {s.last_error}", values
    if warn:
        return diagnostics.WARN, "; ".join(warn), values
    return diagnostics.OK, f"{s.rate_out.rate():.1f} fps" if active else "inactive", values


def timing_array(node_name: str, hardware_id: str, frame: Frame, skipped: int, idle_ns: int,
                 timings: Mapping[str, float], started: float, converted: float,
                 finished: float) -> DiagnosticArray:
    """Where one frame's time went, stamped with the frame's header (to pair it with the results).
    ``idle_ns``: wall ns the previous frame finished; ``timings``: the node's own stages (ms)."""
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
        "process_ms": (finished - converted) * 1e3,
        "node_ms": (finished - frame.received) * 1e3,
    })
    st = diagnostics.status(f"{node_name}: frame timing", hardware_id, diagnostics.OK, "", values)
    msg = diagnostics.array(frame.msg.header.stamp, [st])
    msg.header.frame_id = frame.msg.header.frame_id
    return msg
