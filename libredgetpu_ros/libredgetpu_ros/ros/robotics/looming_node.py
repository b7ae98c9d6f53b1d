"""Looming (collision warning) lifecycle node: camera images in; zone densities, tau and time to contact out.

A :class:`~libredgetpu_ros.ros.camera.CameraNode` whose processor is a ``LoomingDetector``:

- ``looming`` (libredgetpu_ros_interfaces/Looming: zones, tau, ttc; no standard message carries them),
  ``markers`` (a cube per zone, height and colour by density; on the camera's image plane once its
  CameraInfo arrives: ``camera/image_plane.py``), ``annotated`` (grid, tau, TTC; off by default), all
  stamped with the frame's header;
- the time to contact integrates over the frames' header stamps, never the wall clock, so a bag replayed
  into the node gives what processing the bag offline gives; stamps going backwards (a looped bag) restart
  the history;
- diagnostics WARN while tau is above ``warn_tau``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from std_msgs.msg import Header

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.ros.camera import CameraNode, Frame
from libredgetpu_ros.ros.camera.image_plane import ImagePlaneInput
from libredgetpu_ros.ros.robotics import messages
from libredgetpu_ros.ros.robotics.params import LOOMING_PARAMS
from libredgetpu_ros.ros.spinning import run_lifecycle_node_main


def open_detector(p: Any) -> Any:
    """The looming detector the node's parameters ask for (also what offline processing uses)."""
    from libredgetpu_ros.robotics.looming import LoomingDetector
    from libredgetpu_ros.robotics.template import load_template

    if not p.template:
        raise ConfigError("parameter template is empty: set it to a looming template")
    if p.ttc_min_samples > p.ttc_window:
        raise ConfigError(f"ttc_min_samples ({p.ttc_min_samples}) must not exceed ttc_window "
                          f"({p.ttc_window})")
    return LoomingDetector(load_template(p.template), backend=p.backend, device=p.device or None,
                           resize=p.resize, window=p.ttc_window, min_samples=p.ttc_min_samples,
                           contact_tau=p.contact_tau, ttc_mode=p.ttc_mode, max_gap_s=p.max_gap)


class LoomingNode(ImagePlaneInput, CameraNode):
    """Looming detection on the newest camera frame; see the module docstring."""

    PARAMS = LOOMING_PARAMS
    DIAGNOSTICS_NAME = "looming"

    def __init__(self, node_name: str = "looming", **kwargs: Any) -> None:
        self._detector: Any = None
        self._lock = threading.Lock()
        self._pubs: dict[str, Any] = {}
        self._last: Any = None
        self._describe: dict[str, Any] = {}
        super().__init__(node_name, **kwargs)

    def open_processor(self) -> None:
        detector = open_detector(self.params)
        with self._lock:
            self._detector = detector
        self._describe = detector.describe()

    def close_processor(self) -> None:
        with self._lock:
            detector, self._detector = self._detector, None
        self._last = None
        self.close_logged(detector, "the detector")

    def create_outputs(self) -> None:
        self._pubs = {topic: self.output(cls, topic) for topic, cls in messages.LOOMING_OUTPUTS.items()}

    def destroy_outputs(self) -> None:
        self._pubs = {}

    def process(self, rgb: Any, header: Header, frame: Frame) -> Mapping[str, float] | None:
        detector = self._detector
        if detector is None:
            return None
        t0 = time.monotonic()
        result = detector.detect(rgb, messages.stamp_seconds(header))
        t1 = time.monotonic()
        self._last = result
        pubs = self._pubs
        for topic, msg in messages.looming_messages(header, rgb, result, detector.samples, detector.width,
                                                    detector.height, self.params,
                                                    wanted=lambda t: pubs[t].get_subscription_count() > 0,
                                                    plane=self.image_plane(rgb.shape[1], rgb.shape[0])):
            pubs[topic].publish(msg)
        return {"detect": (t1 - t0) * 1e3, "publish": (time.monotonic() - t1) * 1e3}

    def diagnostic_values(self) -> dict[str, object]:
        values: dict[str, object] = {"template": self.params.template,
                                     "backend": self._describe.get("backend", "")}
        last = self._last
        if last is not None:
            values["tau"] = round(last.tau, 3)
            values["ttc_s"] = "none" if last.ttc_s is None else round(last.ttc_s, 3)
            values["ttc_reason"] = last.ttc_reason
        return values

    def diagnostic_warnings(self) -> list[str]:
        last = self._last
        if last is not None and last.tau > self.params.warn_tau:
            return [f"looming: tau {last.tau:.2f} above warn_tau {self.params.warn_tau:g}"]
        return []

    def hardware_id(self) -> str:
        return str(self._describe.get("device") or self._describe.get("backend") or "cpu")


def main(args: list[str] | None = None) -> int:
    return run_lifecycle_node_main(LoomingNode, args, retain_allocations=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
