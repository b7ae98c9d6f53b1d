"""The robotics camera nodes' processors (``ros/camera/processor.py``): what the tracker and looming nodes
do with a frame, and what ``process-bag --node-type tracker|looming`` runs (``ros/bag_nodes.py``).

- :class:`TrackerProcessor`: a ``SpotTracker`` or ``PatternTracker`` (``module``) with the configured colour
  / patch swapped in; ``robotics.messages.tracker_messages``; the last fitted frame (for the node's
  ``~/set_template_region``) and the validity counts of diagnostics;
- :class:`LoomingProcessor`: a ``LoomingDetector``; ``robotics.messages.looming_messages``; the tau
  history and time to contact integrate over the frames' header stamps (stamps going backwards restart it).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

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
from libredgetpu_ros.ros.frame_busy import FRAME_BUSY_WAIT_S, frame_lock
from libredgetpu_ros.ros.params import share_stream
from libredgetpu_ros.ros.robotics import messages
from libredgetpu_ros.ros.robotics.params import parse_color


def _require_template(p: Any, what: str) -> None:
    if not p.template:
        raise ConfigError(f"parameter template is empty: set it to a {what} template")


def open_tracker(p: Any, warn: Warn | None = None, stream: str = "") -> Any:
    """The tracker the node's parameters ask for, with the configured colour / patch swapped in; ``warn``
    hears what was substituted (colour weights clipped to the template's range)."""
    from libredgetpu_ros.robotics.template import load_template

    _require_template(p, "robotics")
    template = load_template(p.template)
    options = {"backend": p.backend, "device": p.device or None, "rate_hz": p.device_share_hz,
               "stream": stream, "cpu_threads": p.cpu_threads,
               "resize": p.resize}
    color = parse_color(p.color) if p.module == "spot" else None  # a bad value refused before any open
    if p.module == "spot":
        from libredgetpu_ros.robotics.spot import SpotTracker

        tracker = SpotTracker(template, mode=p.mode, **options)
    else:
        from libredgetpu_ros.robotics.pattern import PatternTracker

        tracker = PatternTracker(template, mode="normalized" if p.mode == "checked" else "libredgetpu",
                                 **options)
    try:  # a refused colour or patch closes the tracker: a failed configure holds no device or stream
        if color is not None:
            swap = tracker.set_color(color)
            if swap.clipped and warn is not None:
                warn(f"colour {list(color)} does not fit the template's filter scale {swap.scale:.6g}: "
                     f"{swap.clipped} weight(s) clipped, the filter is {[round(v, 4) for v in swap.color]}")
        elif p.module != "spot" and p.template_patch:
            from libredgetpu_ros.perception.images import load_image

            tracker.set_template(load_image(p.template_patch))  # made grey when the tracker tracks grey
    except BaseException:
        tracker.close()
        raise
    return tracker


def open_detector(p: Any, stream: str = "") -> Any:
    """The looming detector the node's parameters ask for."""
    from libredgetpu_ros.robotics.looming import LoomingDetector
    from libredgetpu_ros.robotics.template import load_template

    _require_template(p, "looming")
    if p.ttc_min_samples > p.ttc_window:
        raise ConfigError(f"ttc_min_samples ({p.ttc_min_samples}) must not exceed ttc_window "
                          f"({p.ttc_window})")
    return LoomingDetector(load_template(p.template), backend=p.backend, device=p.device or None,
                           rate_hz=p.device_share_hz, stream=stream, cpu_threads=p.cpu_threads,
                           resize=p.resize,
                           window=p.ttc_window, min_samples=p.ttc_min_samples, contact_tau=p.contact_tau,
                           ttc_mode=p.ttc_mode, max_gap_s=p.max_gap)


def tracker_kernel(tracker: Any) -> tuple[int, int] | None:
    """The pattern tracker's patch size (width, height) in template-input pixels; None for a spot tracker."""
    width = getattr(tracker, "kernel_width", None)
    return None if width is None else (int(width), int(tracker.kernel_height))


T = TypeVar("T")


def track_fitted(tracker: Any, fitted: Any) -> Any:
    """The TrackResult of a frame already fitted to the template (``tracker.fit(rgb)``)."""
    found = tracker.track(fitted)
    return getattr(found, "result", found)  # PatternMatch wraps a TrackResult


class _TemplateProcessor(CameraProcessor):
    """A processor over one robotics module opened from a template (``module``: its ``width`` x ``height``
    input, ``describe()``, ``close()``)."""

    module: Any

    def _opened(self, module: Any) -> None:
        self.module = module
        self._describe: dict[str, Any] = module.describe()

    def blank(self, rgb: np.ndarray | None) -> np.ndarray:
        """``rgb``, or a black frame of the module's input size (a warm-up without a first frame)."""
        return rgb if rgb is not None else np.zeros((self.module.height, self.module.width, 3), np.uint8)

    def hardware_id(self) -> str:
        return described_hardware(self._describe)

    def _values(self) -> dict[str, object]:
        # with this node's stream on the accelerator it shares with the process's other nodes
        return {"template": self.params.template, "backend": self._describe.get("backend", ""),
                **shared_values(self.module.shared_status())}

    def diagnostic_warnings(self) -> list[str]:
        return shared_warnings(self.module.shared_status())

    def fallbacks(self) -> list[str]:
        return [str(self._describe.get("fallback", ""))]

    def close(self) -> None:
        self.module.close()


class TrackerProcessor(_TemplateProcessor):
    """Spot / pattern tracking of one frame; see the module docstring."""

    def __init__(self, params: Any, warn: Warn | None = None, node: str = "") -> None:
        super().__init__(params, warn, node)
        self._opened(open_tracker(params, warn=self.warn, stream=share_stream(node, params.template)))
        self.out_types = dict(messages.TRACKER_OUTPUTS)
        self.last: tuple[Any, int, int] | None = None  # (template-input image, frame width, frame height)
        self._last_offset: tuple[float, float] | None = None
        self._last_reason = ""
        self._not_valid: dict[str, int] = {}  # frames without a valid target, by reason
        # a frame's tracking vs a service's swap, which stages on the runner: on an accelerator that waits
        # for the frame's inference (one device), so the services wait for this at most FRAME_BUSY_WAIT_S
        self._frame_lock = threading.Lock()

    @property
    def tracker(self) -> Any:
        return self.module

    def restart(self) -> None:
        """Activate: ~/set_template_region waits for a frame of now (it cut the patch from the last frame
        before the pause), and diagnostics' direction is not that frame's."""
        self.last, self._last_offset, self._last_reason = None, None, ""

    def warm_up(self, rgb: np.ndarray | None) -> None:
        with contextlib.suppress(InputError):  # tracking keeps no state between frames
            track_fitted(self.tracker, self.tracker.fit(self.blank(rgb)))

    def frame(self, header: Any, rgb: np.ndarray, wanted: Wanted | None = None,
              plane: Any = None, prepared: Any = None) -> FrameOutput:
        tracker = self.tracker
        t0 = time.monotonic()
        fitted = tracker.fit(rgb)
        t1 = time.monotonic()
        with self._frame_lock:  # the camera thread waits as long as it takes (a service at most 1 s)
            result = track_fitted(tracker, fitted)
        t2 = time.monotonic()
        self.last = (fitted, rgb.shape[1], rgb.shape[0])
        self._last_offset = (result.x_offset, result.y_offset) if result.valid else None
        self._last_reason = result.reason
        if not result.valid:
            self._not_valid[result.reason] = self._not_valid.get(result.reason, 0) + 1
        out = messages.tracker_messages(header, rgb, result, tracker.width, tracker.height, self.params,
                                        wanted=wanted, kernel=tracker_kernel(tracker), plane=plane)
        return FrameOutput(out, {"prepare": (t1 - t0) * 1e3, "track": (t2 - t1) * 1e3,
                                 "publish": (time.monotonic() - t2) * 1e3})

    def swap(self, change: Callable[[Any], T], wait_s: float | None = FRAME_BUSY_WAIT_S) -> T:
        """``change(tracker)`` (``~/set_color``, ``~/set_template_region``) between two frames; a frame
        holding the tracker past ``wait_s``: ``FrameBusyError``, nothing swapped."""
        with frame_lock(self._frame_lock, wait_s):
            return change(self.tracker)

    def diagnostic_values(self) -> dict[str, object]:
        tracker = self.tracker
        values: dict[str, object] = {"module": self.params.module, **self._values(),
                                     "parameters_version": tracker.runner.store.version}
        if getattr(tracker, "color", None) is not None:
            values["color"] = " ".join(f"{v:.3f}" for v in tracker.color)
        if self._last_offset is not None:
            from libredgetpu_ros.robotics.offsets import offset_to_direction

            values["direction"] = offset_to_direction(*self._last_offset, self.params.direction_threshold)
        elif self._last_reason:
            values["direction"] = "none"
        if self._last_reason:
            values["last_reason"] = self._last_reason
        for reason, count in sorted(self._not_valid.items()):
            values[f"not_valid_{reason}"] = count
        return values


class LoomingProcessor(_TemplateProcessor):
    """Looming detection of one frame; see the module docstring."""

    def __init__(self, params: Any, warn: Warn | None = None, node: str = "") -> None:
        super().__init__(params, warn, node)
        self._opened(open_detector(params, stream=share_stream(node, params.template)))
        self.out_types = dict(messages.LOOMING_OUTPUTS)
        self.last: Any = None  # the last LoomingResult

    @property
    def detector(self) -> Any:
        return self.module

    def restart(self) -> None:
        """Activate: the tau history starts over and the last result is forgotten (its tau kept the
        ``warn_tau`` WARN, and its ttc_s in diagnostics, after the pause until a frame came)."""
        self.detector.reset()
        self.last = None

    def warm_up(self, rgb: np.ndarray | None) -> None:
        with contextlib.suppress(InputError):  # zones() only: the tau history is left untouched
            self.detector.zones(self.blank(rgb))

    def frame(self, header: Any, rgb: np.ndarray, wanted: Wanted | None = None,
              plane: Any = None, prepared: Any = None) -> FrameOutput:
        detector = self.detector
        t0 = time.monotonic()
        result = detector.detect(rgb, messages.stamp_seconds(header))
        t1 = time.monotonic()
        self.last = result
        out = messages.looming_messages(header, rgb, result, detector.samples, detector.width,
                                        detector.height, self.params, wanted=wanted, plane=plane)
        return FrameOutput(out, {"detect": (t1 - t0) * 1e3, "publish": (time.monotonic() - t1) * 1e3})

    def diagnostic_values(self) -> dict[str, object]:
        values = self._values()
        last = self.last
        if last is not None:
            values["tau"] = round(last.tau, 3)
            values["ttc_s"] = "none" if last.ttc_s is None else round(last.ttc_s, 3)
            values["ttc_reason"] = last.ttc_reason
        return values

    def diagnostic_warnings(self) -> list[str]:
        warnings = super().diagnostic_warnings()
        last = self.last
        if last is not None and last.tau > self.params.warn_tau:
            warnings.append(f"looming: tau {last.tau:.2f} above warn_tau {self.params.warn_tau:g}")
        return warnings
