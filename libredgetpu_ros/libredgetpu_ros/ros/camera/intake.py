"""Frame arrival bookkeeping of a camera node (``ros/camera/node_base.py``): counters, sequence gaps,
transport loss.

Two kinds of loss are told apart:

- sequence gaps (``frames_lost``): frames a publisher sent that this node never took, either overwritten in
  the reader's 5-deep queue while a frame was processed (by design when the model is slower than the
  camera) or lost on the way;
- transport loss (``frames_lost_transport``): samples the DDS reader itself reports as lost (rmw's
  message-lost event). Overwriting in the queue does not raise it; frames that do not fit the
  shared-memory segment and fall back to fragmented UDP do (docs/perception_node.md "Large frames"). The
  first such loss is logged once as a warning naming the segment size and the largest frame seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from libredgetpu_ros.ros import diagnostics
from libredgetpu_ros.ros.dds_profile import shm_segment_bytes

# rmw_fastrtps has been seen to report one bogus message-lost event (count 2^64 - 2^31, change 2^31 - 1)
# besides the real ones: changes this large are not frames.
_PLAUSIBLE_LOSS = 1 << 30


@dataclass(slots=True)
class Frame:
    """A camera message and when it arrived: ``received`` (monotonic s) when the subscription callback ran,
    and on the wall clock of rmw's timestamps (ns; 0 = the rmw does not report it): ``callback_ns`` (the
    same moment), ``source_ns`` (the publisher wrote it) and ``rmw_ns`` (the DDS reader received it)."""

    msg: Any
    received: float
    callback_ns: int = 0
    source_ns: int = 0
    rmw_ns: int = 0


class FrameStats:
    """Counters and timings the diagnostics report; written by the image thread, read by the timer."""

    def __init__(self) -> None:
        self.received = 0
        self.dropped = 0  # frames skipped for a newer one (taken and skipped, or never delivered: ``lost``)
        self.lost = 0  # gaps in a publisher's sequence numbers: overwritten in the reader's queue, or lost
        self.lost_transport = 0  # samples the DDS reader reports lost (never delivered to the queue)
        self.largest_frame = 0  # bytes of the largest frame received
        self.processed = 0
        self.errors = 0
        self.bad_input = diagnostics.Counters()
        self.rate_in = diagnostics.RateMeter()
        self.rate_out = diagnostics.RateMeter()
        self.last_error = ""
        self._stage_sums: dict[str, float] = {}
        self._count = 0
        self._latency_sum = 0.0
        self._latency_max = 0.0
        self._last_period: tuple[dict[str, float], float, float] = ({}, 0.0, 0.0)

    def add_result(self, timings: dict[str, float], latency_ms: float) -> None:
        self.processed += 1
        self.rate_out.tick()
        self._count += 1
        for stage, ms in timings.items():
            self._stage_sums[stage] = self._stage_sums.get(stage, 0.0) + float(ms)
        self._latency_sum += latency_ms
        self._latency_max = max(self._latency_max, latency_ms)

    def take_period(self) -> tuple[int, dict[str, float], float, float]:
        """(results, mean ms per stage, mean and max node latency ms) since the last call; resets them."""
        n, sums, lat, lat_max = self._count, self._stage_sums, self._latency_sum, self._latency_max
        self._count, self._stage_sums, self._latency_sum, self._latency_max = 0, {}, 0.0, 0.0
        if n:  # an idle period repeats the last measured one rather than reporting zeros
            self._last_period = ({k: v / n for k, v in sums.items()}, lat / n, lat_max)
        return (n, *self._last_period)


class Intake:
    """Per-frame arrival accounting (image thread) and the transport-loss warning (rmw event thread)."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self.stats = FrameStats()
        self.skipped = 0  # frames skipped since the last processed one (for ~/timing)
        self._last_seq: dict[bytes, int] = {}  # publisher gid -> its last sequence number seen
        self._warned = False

    def reset(self, stats: bool = False) -> None:
        """On activate (sequence state) and configure (also the counters and the once-only warning)."""
        self.skipped, self._last_seq = 0, {}
        if stats:
            self.stats, self._warned = FrameStats(), False

    def arrived(self, msg: Any, info: Any) -> Frame:
        received = time.monotonic()
        s = self.stats
        s.received += 1
        s.rate_in.tick(received)
        s.largest_frame = max(s.largest_frame, len(msg.data))
        # Frames this publisher sent since its previous one that never reached us: overwritten in the
        # reader's queue while a frame was processed (or lost on the way).
        seq, gid = info.get("publication_sequence_number"), info.get("publisher_gid")
        if seq and gid:
            last = self._last_seq.get(gid["data"])
            if last is not None and seq > last + 1:
                s.dropped += seq - last - 1
                s.lost += seq - last - 1
                self.skipped += seq - last - 1
            self._last_seq[gid["data"]] = seq
        return Frame(msg, received, time.time_ns(), info.get("source_timestamp") or 0,
                     info.get("received_timestamp") or 0)

    def taken_newer(self) -> None:
        """A queued frame was taken and skipped for a newer one."""
        self.stats.dropped += 1
        self.skipped += 1

    def on_message_lost(self, event: Any) -> None:
        """rclpy's message-lost event (``QoSMessageLostInfo``): count, and warn the first time."""
        change = int(event.total_count_change)
        if not 0 < change < _PLAUSIBLE_LOSS:
            return
        self.stats.lost_transport += change
        if not self._warned:
            self._warned = True
            self._warn(loss_warning(self.stats.lost_transport, self.stats.largest_frame, shm_segment_bytes()))


def loss_warning(lost: int, largest_frame: int, segment: int | None) -> str:
    """The once-only warning text: what was lost, the likely cause and where the setting is documented.
    The lost frames' size is unknown (they never arrived); the largest that did is given for scale."""
    mib = 1024 * 1024
    segment_text = f"the {segment / mib:.1f} MiB" if segment is not None else "the"
    return (f"camera frames are being lost before they reach this node ({lost} so far, reported by DDS; the "
            f"largest frame that arrived: {largest_frame / mib:.1f} MiB). Frames larger than {segment_text} "
            f"shared-memory segment of the Fast DDS profile travel as fragmented UDP, where bursts are "
            f"dropped: raise segment_size in the profile (FASTDDS_DEFAULT_PROFILES_FILE) for both processes, "
            f"see docs/perception_node.md 'Large frames'. Warned once; diagnostics count "
            f"frames_lost_transport")
