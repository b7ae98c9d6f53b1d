"""The flow node's processor (``ros/camera/processor.py``): a ``VisualCompass`` over an ``OpticalFlow`` opened
from the node's parameters and ``flow.messages.flow_messages``; what the node runs per frame and what
``process-bag --node-type flow`` runs (``ros/bag_nodes.py``).

The frame pair, rates and heading run on the frames' header stamps. The compass is shared by the camera
thread and the node's main executor (``~/reset_heading``, a runtime parameter change, a CameraInfo's field
of view) under one lock, which the main executor waits for at most ``FRAME_BUSY_WAIT_S`` (a frame holds it
across the model's invoke: ``ros/frame_busy.py``); the pairs counted per reason (diagnostics) under another,
as the diagnostics timer reads and resets them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError, InputError
from libredgetpu_ros.ros.camera.processor import (
    CameraProcessor,
    FrameOutput,
    Wanted,
    Warn,
    described_hardware,
    shared_values,
    shared_warnings,
)
from libredgetpu_ros.ros.flow.messages import FLOW_OUTPUTS, flow_messages, stamp_seconds
from libredgetpu_ros.ros.frame_busy import FrameBusyError, frame_lock
from libredgetpu_ros.ros.params import share_stream

# Settings of the flow that may change while active (applied under the processor lock).
_RUNTIME_FLOW = ("temperature", "min_texture", "min_confidence", "min_margin", "max_gap", "min_match")
# Reasons a pair has no estimate because of the scene (diagnostics warn when most pairs have one).
_SCENE_REASONS = ("low_texture", "low_confidence", "ambiguous", "saturated")


def open_compass(p: Any, stream: str = "") -> Any:
    """The compass (over its optical flow) the node's parameters ask for (``stream``: its flow's stream
    name on a shared accelerator)."""
    from libredgetpu_ros.robotics.compass import VisualCompass

    return VisualCompass.from_template(
        p.model, p.fov_deg, p.projection, backend=p.backend, device=p.device or None,
        rate_hz=p.device_share_hz, stream=stream, mode=p.mode,
        search_range=p.search_range, pool_factor=p.pool_factor, temperature=p.temperature,
        min_texture=p.min_texture, min_confidence=p.min_confidence, min_margin=p.min_margin,
        max_gap=p.max_gap, refine=p.refine, min_match=p.min_match)


class FlowProcessor(CameraProcessor):
    """Optical flow and heading of one frame (against the previous one); see the module docstring."""

    def __init__(self, params: Any, warn: Warn | None = None, node: str = "") -> None:
        super().__init__(params, warn, node)
        self.compass = open_compass(params, share_stream(node, params.model))
        self.out_types = dict(FLOW_OUTPUTS)
        flow = self.compass.flow
        self._lock = threading.Lock()  # the compass: camera thread vs services, parameters, camera info
        described = flow.runner.describe()
        self._describe = {"backend": flow.runner.backend_name, "device": str(described.get("device", "")),
                          "fallback": str(described.get("fallback", "")),
                          "template": flow.template.name, "grid_step_px": flow.grid_step}
        self.fov_source = "parameter"
        # pairs per reason since configure, and since the last diagnostics message
        self._count_lock = threading.Lock()
        self._reasons: Counter[str] = Counter()
        self._period: Counter[str] = Counter()
        self._saturated = 0
        self._last_confidence = 0.0

    @classmethod
    def offline_notes(cls, params: Any) -> list[str]:
        if not params.use_camera_info:
            return []
        return [f"process-bag reads no CameraInfo: the flow node's field of view is fov_deg "
                f"({params.fov_deg:g} deg)"]

    def warm_up(self, rgb: np.ndarray | None) -> None:
        flow = self.compass.flow
        rgb = rgb if rgb is not None else np.zeros((flow.height, flow.width, 3), np.uint8)
        with contextlib.suppress(InputError):  # features() only: the frame pair and heading are untouched
            flow.features(rgb)

    def frame(self, header: Any, rgb: np.ndarray, wanted: Wanted | None = None,
              plane: Any = None, prepared: Any = None) -> FrameOutput:
        started = time.monotonic()
        with self._lock:
            compass = self.compass
            result = compass.step(rgb, stamp_seconds(header))
            heading_deg, fov, projection = compass.heading_deg, compass.fov_deg, compass.projection
        computed = time.monotonic()
        flow = result.flow
        reason = flow.reason or "estimate"
        with self._count_lock:
            self._reasons[reason] += 1
            self._period[reason] += 1
            self._saturated += flow.saturated
        out = flow_messages(header, result, heading_deg, fov, projection, rgb.shape[1], self.params,
                            wanted=wanted)
        bad: tuple[str, ...] = ()
        if result.valid and flow.dt > 0.0:
            self._last_confidence = flow.confidence
            if all(topic != "flow" for topic, _ in out):  # pragma: no cover - never non-finite; counted if so
                bad = ("non_finite",)
        elif result.valid:
            with self._count_lock:
                self._reasons["unstamped"] += 1  # an estimate, but no time between the frames: no rate
        return FrameOutput(out, {"flow": (computed - started) * 1e3,
                                 "publish": (time.monotonic() - computed) * 1e3}, bad)

    def restart(self) -> None:
        """Frames from before a pause do not pair with new ones (the node's activate)."""
        with self._lock:
            self.compass.flow.reset()

    def reset_heading(self) -> float:
        """The integrated heading back to 0 (the current pair is kept); returns the previous one. From the
        main executor: ``FrameBusyError`` when a frame holds the compass past ``FRAME_BUSY_WAIT_S``."""
        with frame_lock(self._lock):
            previous, self.compass.heading_deg = self.compass.heading_deg, 0.0
        return previous

    def camera_fov(self, fov: float) -> bool:
        """The field of view from the camera's CameraInfo (``ConfigError`` when the compass refuses it);
        True when it changed."""
        with self._lock:
            if abs(self.compass.fov_deg - fov) <= 1e-9:
                return False
            self.compass.set_fov(fov)
            self.fov_source = "camera_info"
        return True

    def diagnostic_values(self) -> dict[str, object]:
        # Without the compass lock: a frame holds it across the model's invoke, and a stuck frame would block
        # the main executor here (diagnostics, report_stuck, the stuck exit). Two float reads: a pair from
        # two frames does no harm in a status.
        compass = self.compass
        heading, fov = compass.heading_deg, compass.fov_deg
        with self._count_lock:
            reasons, saturated = Counter(self._reasons), self._saturated
        values: dict[str, object] = {
            "template": self._describe["template"], "backend": self._describe["backend"],
            "mode": self.params.mode, "projection": self.params.projection, "fov_deg": round(fov, 3),
            "fov_source": self.fov_source, "heading_deg": round(heading, 3), "estimates": reasons["estimate"],
            "saturated": saturated, "last_confidence": round(self._last_confidence, 3)}
        for reason in (*_SCENE_REASONS, "first_frame", "gap", "size_changed", "stamp", "unstamped"):
            values[f"no_estimate_{reason}"] = reasons[reason]
        # this node's stream on the accelerator it shares with the process's other nodes (counters only)
        values.update(shared_values(self.compass.shared_status()))
        return values

    def fallbacks(self) -> list[str]:
        return [self._describe["fallback"]]

    def diagnostic_warnings(self) -> list[str]:
        with self._count_lock:
            period, self._period = self._period, Counter()
        pairs = sum(n for reason, n in period.items() if reason != "first_frame")
        scene = sum(period[r] for r in _SCENE_REASONS)
        warnings = shared_warnings(self.compass.shared_status())
        if pairs and scene * 2 > pairs:
            detail = ", ".join(f"{r} {period[r]}" for r in _SCENE_REASONS if period[r])
            warnings.append(f"no motion estimate for {scene} of {pairs} frame pairs ({detail}): the scene "
                            f"lacks texture or repeats; nothing is published on flow for them")
        return warnings

    def hardware_id(self) -> str:
        return described_hardware(self._describe)

    def check_runtime_params(self, changes: dict[str, Any]) -> str | None:
        try:
            with frame_lock(self._lock):  # the main executor's parameter callback: never blocked for good
                return self._apply_runtime_params(changes)
        except FrameBusyError as exc:
            return f"not applied: {exc}"

    def _apply_runtime_params(self, changes: dict[str, Any]) -> str | None:
        """``check_runtime_params`` under the compass lock."""
        compass = self.compass
        if "fov_deg" in changes and self.fov_source == "camera_info":
            return (f"the field of view comes from CameraInfo ({compass.fov_deg:.2f} deg); set "
                    f"use_camera_info false and configure again to use fov_deg")
        if "fov_deg" in changes:
            try:
                compass.set_fov(float(changes["fov_deg"]))
            except ConfigError as exc:
                return str(exc)
        for name in _RUNTIME_FLOW:
            if name in changes:
                setattr(compass.flow, name, float(changes[name]))
        return None

    def close(self) -> None:
        self.compass.close()
