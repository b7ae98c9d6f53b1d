"""The control node's counters and how they become one diagnostics status per period.

Each counter is written by one thread only (the state loop or the services); diagnostics reads them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from libredgetpu_ros.ros import diagnostics


@dataclass
class LoopStats:
    states: int = 0
    commands: int = 0
    stale_dropped: int = 0
    size_mismatch: int = 0
    missing_joints: int = 0
    invalid: int = 0  # states the engine refused (NaN/inf values): dropped, the loop carries on
    last_invalid: str = ""  # why the last one was refused
    lost: int = 0  # states DDS reported lost before the loop took them (message-lost events)
    last_state_time: float | None = None  # time.monotonic() of the last state received
    warned: set[str] = field(default_factory=set)
    state_rate: diagnostics.RateMeter = field(default_factory=diagnostics.RateMeter)
    command_rate: diagnostics.RateMeter = field(default_factory=diagnostics.RateMeter)


@dataclass
class SwapStats:
    accepted: int = 0
    refused: int = 0
    dry_runs: int = 0
    replayed: int = 0  # retried requests answered from the idempotency record, not applied again
    warm_ups: int = 0  # full-size dry runs of the service path the node made itself (one per configure)
    last_swap_time: float | None = None  # time.time() of the last accepted swap
    last_swap_total_ms: float = float("nan")
    last_refusal: str = ""


@dataclass
class LoopVerdict:
    """Turns the loop counters into a level and message, per report period (counts since the last one)."""

    stale_mark: int = 0
    invalid_mark: int = 0

    def judge(self, loop: LoopStats, active: bool, stale_timeout: float) -> tuple[int, str]:
        stale_now, self.stale_mark = loop.stale_dropped - self.stale_mark, loop.stale_dropped
        invalid_now, self.invalid_mark = loop.invalid - self.invalid_mark, loop.invalid
        if not active:
            return diagnostics.OK, "inactive (weights can be loaded)"
        age = None if loop.last_state_time is None else time.monotonic() - loop.last_state_time
        if invalid_now:
            return diagnostics.WARN, (f"{invalid_now} invalid state(s) dropped since the last report: "
                                      f"{loop.last_invalid}")
        if stale_now:
            return diagnostics.WARN, (f"{stale_now} stale state(s) since the last report "
                                      f"(stale_timeout {stale_timeout} s)")
        if age is not None and age > stale_timeout:
            return diagnostics.WARN, (f"state stale: last one {age:.2f} s ago "
                                      f"(stale_timeout {stale_timeout} s)")
        if loop.state_rate.rate() > 0 and loop.command_rate.rate() == 0:
            return diagnostics.WARN, ("states arrive but none produces a command "
                                      "(stale, wrong size or invalid)")
        return diagnostics.OK, "running"


def values(loop: LoopStats, swaps: SwapStats) -> dict[str, object]:
    """The counters as diagnostics key/values (the engine's fields are added by the node)."""
    age = None if loop.last_state_time is None else time.monotonic() - loop.last_state_time
    return {
        "state_rate_hz": loop.state_rate.rate(),
        "command_rate_hz": loop.command_rate.rate(),
        "states": loop.states,
        "commands": loop.commands,
        "stale_dropped": loop.stale_dropped,
        "size_mismatch": loop.size_mismatch,
        "missing_joints": loop.missing_joints,
        "invalid_states": loop.invalid,
        "last_invalid_state": loop.last_invalid,
        "states_lost": loop.lost,
        "last_state_age_s": "never" if age is None else age,
        "swaps_accepted": swaps.accepted,
        "swaps_refused": swaps.refused,
        "swaps_replayed": swaps.replayed,
        "dry_runs": swaps.dry_runs,
        "set_weights_warm_ups": swaps.warm_ups,
        "last_swap_time": "never" if swaps.last_swap_time is None else swaps.last_swap_time,
        "last_swap_total_ms": swaps.last_swap_total_ms,
        "last_refusal": swaps.last_refusal,
    }
