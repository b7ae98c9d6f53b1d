"""LoomingDetector: edge density in a grid of zones, tau = centre / mean(periphery), time to contact.

The template is ``QUANTIZE -> Sobel x, Sobel y -> square, add -> AVERAGE_POOL (zones x zones) -> uint8`` (the
compiled op covers all of it); the zone densities are the output dequantized with the model's scale. An object
approaching the camera inside the centre zone grows there: tau rises above 1; a receding one lowers it.

Time to contact follows LibrEdgeTPU's ``compute_ttc`` with the frames' own stamps instead of a fixed ``dt``
(so a bag replay gives what the live run gave): with the tau history over a window, ``rate = (tau_last -
tau_first) / (t_last - t_first)``; when ``rate > 0`` and ``tau_last > 1``, ``ttc = max(0, (contact_tau -
tau_last) / rate)`` (``contact_tau`` = 2: the centre twice as dense as the periphery); otherwise there is no
contact coming and ``ttc_s`` is None (LibrEdgeTPU returns inf). That tau "TTC" is not a time (it stays None
on natural textures and reads 0 s on a checkerboard 1-5 s away, docs/robotics.md): it is kept as the
``libredgetpu`` TTC mode. The default ``scale`` mode measures the expansion of the image centre between
stamped frames and gives a time to contact in seconds with a validity and a reason (robotics/ttc.py), and
its zones (and tau) have the template's border response removed (robotics/looming_border.py: the SAME
padding makes a frame's own brightness an edge along the top and left zones). In both modes stamps going
backwards and gaps over ``max_gap_s`` restart the history."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError, InputError, ModelFormatError
from libredgetpu_ros.robotics.base import RoboticsModule
from libredgetpu_ros.robotics.looming_border import BorderCorrection, dequantize
from libredgetpu_ros.robotics.template import RoboticsTemplate, TemplateRunner, load_template
from libredgetpu_ros.robotics.ttc import ScaleTtc, TtcSettings

TAU_EPSILON = 1e-6  # LibrEdgeTPU's floor under the periphery mean
TTC_MODES = ("scale", "libredgetpu")


@dataclass(frozen=True, slots=True)
class LoomingResult:
    zones: np.ndarray  # float32 (zones, zones), row-major from the top-left
    tau: float
    ttc_s: float | None  # None: no time to contact (ttc_reason says why)
    stamp_s: float | None
    ttc_reason: str = ""  # "ok" with a TTC; else filling, low_texture, poor_fit, not_approaching, no_stamp
    scale: float | None = None  # scale mode: centre expansion from the reference frame (1: none)

    @property
    def ttc_valid(self) -> bool:
        return self.ttc_s is not None

    def to_dict(self) -> dict[str, Any]:
        return {"zones": [[float(v) for v in row] for row in self.zones], "tau": self.tau,
                "ttc_s": self.ttc_s, "ttc_valid": self.ttc_valid, "ttc_reason": self.ttc_reason,
                "scale": self.scale, "stamp_s": self.stamp_s}


def compute_tau(zones: np.ndarray, epsilon: float = TAU_EPSILON) -> float:
    """Centre zone / mean of the others (an odd square grid; 3 x 3 in the templates)."""
    flat = np.asarray(zones).reshape(-1).tolist()  # 9 Python floats: cheaper than NumPy calls on them
    side = math.isqrt(len(flat))
    if side * side != len(flat) or side % 2 == 0:
        raise InputError(f"zones must be an odd square grid, got {len(flat)} values")
    centre = flat[len(flat) // 2]
    periphery = (math.fsum(flat) - centre) / (len(flat) - 1)
    return float(centre / max(periphery, epsilon))


class TtcEstimator:
    """Time to contact from (stamp, tau) pairs (see the module docstring); stamps must increase."""

    def __init__(self, window: int = 5, min_samples: int = 3, contact_tau: float = 2.0,
                 max_gap_s: float = math.inf) -> None:
        if window < 2 or not 2 <= min_samples <= window:
            raise ConfigError(f"need window >= 2 and 2 <= min_samples <= window, got window={window}, "
                              f"min_samples={min_samples}")
        if not contact_tau > 1:
            raise ConfigError(f"contact_tau must be > 1, got {contact_tau}")
        if not max_gap_s > 0:
            raise ConfigError(f"max_gap_s must be > 0, got {max_gap_s}")
        self.min_samples, self.contact_tau, self.max_gap_s = min_samples, float(contact_tau), float(max_gap_s)
        self._history: deque[tuple[float, float]] = deque(maxlen=window)

    def reset(self) -> None:
        self._history.clear()

    @property
    def samples(self) -> int:
        """Frames in the history now."""
        return len(self._history)

    def update(self, stamp_s: float, tau: float) -> float | None:
        if not math.isfinite(stamp_s) or not math.isfinite(tau):
            raise InputError(f"stamp {stamp_s} / tau {tau} must be finite")
        last = self._history[-1][0] if self._history else None
        if last is not None and (stamp_s <= last or stamp_s - last > self.max_gap_s):
            # time went backwards (bag loop, clock reset) or the stream stopped: start over rather than divide
            # by a negative span or trust a rate across the gap
            self._history.clear()
        self._history.append((float(stamp_s), float(tau)))
        if len(self._history) < self.min_samples:
            return None
        (t0, tau0), (t1, tau1) = self._history[0], self._history[-1]
        rate = (tau1 - tau0) / (t1 - t0)
        if rate <= 0 or tau1 <= 1.0:
            return None
        return max(0.0, (self.contact_tau - tau1) / rate)


class LoomingDetector(RoboticsModule):
    """Zone densities and tau per frame on a looming template; ``ttc`` over a stamped sequence."""

    MODULE = "looming"

    def __init__(self, template: RoboticsTemplate, backend: str = "auto", device: Any = None,
                 resize: bool = True, window: int = 5, min_samples: int = 3, contact_tau: float = 2.0,
                 backend_object: Any = None, ttc_mode: str = "scale", max_gap_s: float = 0.5,
                 ttc_settings: TtcSettings | None = None, rate_hz: float = 0.0,
                 cpu_threads: int | None = 1, stream: str = "") -> None:
        if ttc_mode not in TTC_MODES:
            raise ConfigError(f"ttc_mode must be one of {', '.join(TTC_MODES)}, got {ttc_mode!r}")
        self.ttc_mode = ttc_mode
        self.template = template
        self.height, self.width, self.channels = template.image_shape
        out = template.output
        self.zones_per_side = template.int_field("zones", 3, 1, 255)
        if int(np.prod(out.shape)) != self.zones_per_side ** 2 or out.dtype != np.uint8:
            raise ModelFormatError(f"{template.compiled_path or template.twin_path}: output {out.name!r} is "
                                   f"{out.dtype} {out.shape}; a {self.zones_per_side}x{self.zones_per_side} "
                                   f"looming template gives {self.zones_per_side ** 2} uint8 zones")
        self.resize = resize
        self.ttc = TtcEstimator(window, min_samples, contact_tau, max_gap_s)
        settings = ttc_settings or TtcSettings()
        if ttc_settings is None and max_gap_s != settings.max_gap_s:
            from dataclasses import replace

            settings = replace(settings, max_gap_s=max_gap_s)
        self.scale_ttc = ScaleTtc(settings)
        self.border = BorderCorrection(template, self.zones_per_side) if ttc_mode == "scale" else None
        self._scale, self._zero = np.float32(out.scale), np.float32(out.zero_point)
        # opened last: a setting refused above leaves no backend (an Edge TPU and its broker stream) open
        self.runner = TemplateRunner(template, backend, device, backend_object=backend_object,
                                     rate_hz=rate_hz, stream=stream, cpu_threads=cpu_threads)

    @classmethod
    def from_template(cls, size: int = 64, zones: int = 3, folder: Path | None = None,
                      **kwargs: Any) -> LoomingDetector:
        return cls(load_template(f"looming_{size}x{size}_{zones}x{zones}", folder), **kwargs)

    @property
    def samples(self) -> int:
        """Frames in the active TTC history now."""
        return self.scale_ttc.samples if self.ttc_mode == "scale" else self.ttc.samples

    def reset(self) -> None:
        """Forget the TTC history (both modes)."""
        self.ttc.reset()
        self.scale_ttc.reset()

    def zones(self, image: object) -> np.ndarray:
        """Zone edge densities (float32, zones x zones) of one frame."""
        outputs, _ = self.runner.run([self.model_input(image)])
        return self.decode(outputs[self.template.output.name])

    def decode(self, raw: np.ndarray) -> np.ndarray:
        """Raw uint8 zone outputs -> densities (LibrEdgeTPU's ``dequantize``: (q - zp) * scale, float32)."""
        return dequantize(raw, self._zero, self._scale, self.zones_per_side)

    def detect(self, image: object, stamp_s: float | None = None) -> LoomingResult:
        """Zones and tau of a frame; with ``stamp_s`` (the frame's time) also the TTC over the history."""
        fitted = self.fit(image)
        outputs, _ = self.runner.run([fitted[None]])
        raw = outputs[self.template.output.name]
        # scale mode: the padding's response along the border taken out (one compiled call with the decode)
        zones = self.decode(raw) if self.border is None else self.border.zones(raw, fitted)
        tau = compute_tau(zones)
        if stamp_s is None:
            return LoomingResult(zones, tau, None, None, "no_stamp")
        if self.ttc_mode == "libredgetpu":
            ttc = self.ttc.update(float(stamp_s), tau)
            reason = "ok" if ttc is not None else (
                "filling" if self.ttc.samples < self.ttc.min_samples else "not_approaching")
            return LoomingResult(zones, tau, ttc, stamp_s, reason)
        gray = fitted[:, :, 0] if fitted.shape[2] == 1 else fitted.mean(axis=2)
        estimate = self.scale_ttc.update(gray, float(stamp_s))
        return LoomingResult(zones, tau, estimate.ttc_s, stamp_s, estimate.reason, estimate.scale)

    def details(self) -> dict[str, Any]:
        return {"zones": self.zones_per_side, "ttc_mode": self.ttc_mode}
