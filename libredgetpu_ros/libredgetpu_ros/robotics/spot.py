"""SpotTracker: where the brightest (or best-matching colour) region is, as an offset from the image centre.

The template is ``QUANTIZE -> [CONV_2D 1x1 colour filter + ReLU] -> SOFTMAX -> soft argmax`` (the bright
variant has no filter). The colour variants hold the filter's three int8 weights in the PARAMETER_CACHING blob
bytes 0..2 (value XOR 0x80), which is checked against the twin at load. ``set_color(r, g, b)`` quantizes new
weights with the filter scale of the LOADED model (each colour template was quantized on its own: 1/127 for
red, green, blue and yellow, 0.5/127 for cyan and magenta, 0.33/127 for white; sidecars say 1/127 for all),
so a swap between colours of one scale gives exactly the other template's bytes and otherwise the nearest
values on the loaded scale (out-of-range weights are clipped and reported).

Two modes: ``checked`` (default) adds to every result whether it is valid, why not, and how much of the frame
responds (robotics/spot_validity.py: a frame with no target, a target too large for the template's int8
softmax, two targets, all give no offset and a zero servo error); ``libredgetpu`` is LibrEdgeTPU's decode
alone (every result "valid", reason "unchecked").
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from libredgetpu_ros.errors import ConfigError, ModelFormatError, WeightsError
from libredgetpu_ros.reparam import device_to_int8, make_patch
from libredgetpu_ros.robotics.base import RoboticsModule
from libredgetpu_ros.robotics.offsets import OffsetDecoder, TrackResult
from libredgetpu_ros.robotics.spot_kernels import OK, REASONS
from libredgetpu_ros.robotics.spot_validity import SpotValidity, ValidityLimits
from libredgetpu_ros.robotics.template import RoboticsTemplate, TemplateRunner, load_template

# LibrEdgeTPU's colour presets (tracker/templates.py COLOR_FILTER_WEIGHTS): [R, G, B] filter weights.
COLOR_PRESETS: dict[str, tuple[float, float, float]] = {
    "red": (1.0, -0.5, -0.5), "green": (-0.5, 1.0, -0.5), "blue": (-0.5, -0.5, 1.0),
    "yellow": (0.5, 0.5, -1.0), "white": (0.33, 0.33, 0.33), "cyan": (-0.5, 0.5, 0.5),
    "magenta": (0.5, -0.5, 0.5),
}
MODES = ("checked", "libredgetpu")  # checked: validity per frame; libredgetpu: its decode alone
FILTER_OFFSETS = np.arange(3, dtype=np.intp)  # PARAMETER_CACHING bytes of the R, G, B filter weights
FILTER_OFFSETS.setflags(write=False)  # one checked array: later patches skip re-checking it


class ColorSwap(NamedTuple):
    """What one ``set_color`` did (errors are raised, so a report always describes published weights)."""

    version: int
    weights: tuple[int, int, int]  # the int8 filter values now in the model
    clipped: int  # channels outside the loaded scale's range, set to the nearest end
    scale: float  # the loaded model's filter scale
    total_us: float

    @property
    def color(self) -> tuple[float, float, float]:
        """The real filter weights now in the model (int8 * scale)."""
        return tuple(v * self.scale for v in self.weights)


def quantize_color(rgb: tuple[float, float, float] | list[float],
                   scale: float) -> tuple[tuple[int, ...], int]:
    """(int8 values, clipped count) of R, G, B filter weights on ``scale`` (round half to even, like the
    converter); NaN/inf or a wrong length is a WeightsError. Plain Python: three values, microseconds."""
    if len(rgb) != 3:
        raise WeightsError(f"a colour is 3 weights (R, G, B), got {len(rgb)}")
    values, clipped = [], 0
    for w in rgb:
        w = float(w)
        if not math.isfinite(w):
            raise WeightsError(f"colour weights must be finite, got {list(rgb)}")
        ratio = w / scale  # may overflow to +-inf (|w| > ~1e306 on a small scale): clipped, never rounded
        if -128.5 <= ratio < 127.5:  # exactly where round() (half to even) lands in -128..127
            q = round(ratio)
        else:
            clipped += 1
            q = 127 if ratio > 0 else -128
        values.append(q)
    return tuple(values), clipped


class SpotTracker(RoboticsModule):
    """Bright-spot / colour tracking on a spot template (Edge TPU or its CPU twin)."""

    MODULE = "spot"

    def __init__(self, template: RoboticsTemplate, backend: str = "auto", device: Any = None,
                 resize: bool = True, backend_object: Any = None, mode: str = "checked",
                 limits: ValidityLimits | None = None, rate_hz: float = 0.0,
                 cpu_threads: int | None = 1, stream: str = "") -> None:
        if mode not in MODES:
            raise ConfigError(f"spot mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.template = template
        self.mode = mode
        self.height, self.width, self.channels = template.image_shape
        self.resize = resize
        self.variant = str(template.sidecar.get("variant", "color" if self.channels == 3 else "bright"))
        self.decoder = OffsetDecoder(template.output, template.field("temperature"),
                                     template.field("y_offset"))
        self._filter = template.conv_weights(0) if self.channels == 3 else None
        twin_tensors = ()
        if self._filter is not None:
            if tuple(self._filter.shape) != (1, 1, 1, 3):
                raise ModelFormatError(f"{template.twin_path}: colour filter {self._filter.name!r} has shape "
                                       f"{tuple(self._filter.shape)}, expected (1, 1, 1, 3)")
            self.filter_scale = template.weight_scale(self._filter)
            self._check_filter_bytes()
            twin_tensors = (self._filter.index,)
        else:
            self.filter_scale = None
        self.validity = SpotValidity(template, limits) if mode == "checked" else None
        self._output_name = template.output.name
        self.runner = TemplateRunner(template, backend, device, twin_tensors=twin_tensors,
                                     backend_object=backend_object, rate_hz=rate_hz, stream=stream,
                                     cpu_threads=cpu_threads)

    def _check_filter_bytes(self) -> None:
        """The filter's int8 values must sit at PARAMETER_CACHING bytes 0..2 of the compiled model."""
        pc = self.template.blobs().get("pc")
        if pc is None:
            return  # twin only: nothing to patch on a device
        twin_values = self.template.twin.buffer_data(self._filter).reshape(-1)
        if pc.size < 3 or not np.array_equal(device_to_int8(pc[:3]), twin_values):
            raise ModelFormatError(f"{self.template.compiled_path}: PARAMETER_CACHING bytes 0..2 do not "
                                   f"hold the colour filter {twin_values.tolist()} of the twin; cannot swap "
                                   f"colours")

    @classmethod
    def from_template(cls, size: int = 64, variant: str = "bright", folder: Path | None = None,
                      **kwargs: Any) -> SpotTracker:
        """``bright_{size}x{size}`` or ``color_{colour}_{size}x{size}`` (variant "bright", "red", ...)."""
        name = variant if variant == "bright" or variant.startswith("color_") else f"color_{variant}"
        return cls(load_template(f"{name}_{size}x{size}", folder), **kwargs)

    @property
    def color(self) -> tuple[float, float, float] | None:
        """The active filter's real (R, G, B) weights (None for the bright variant)."""
        if self._filter is None:
            return None
        values = self.runner.parameters.twin[self._filter.index].reshape(-1)
        return tuple(float(v) * self.filter_scale for v in values)

    def track(self, image: object) -> TrackResult:
        """Where the target is in ``image``; in the ``checked`` mode not valid (offset None, servo error
        zero, a reason) when the frame has no single compact target (robotics/spot_validity.py)."""
        fitted = self.fit(image)
        outputs, parameters = self.runner.run((fitted[None],))
        raw = outputs[self._output_name]
        validity = self.validity
        if validity is None:
            return self.decoder.decode(raw, parameters.version)
        # the filter the device ran with: the same parameter set's, so a concurrent set_color cannot mix
        weights = None if self._filter is None else parameters.twin[self._filter.index]
        reason, coverage, mass, _, _ = validity.frame(fitted, weights, self.filter_scale)
        return self.decoder.decode(raw, parameters.version, reason == OK, REASONS[reason], coverage, mass)

    def set_color(self, rgb: tuple[float, float, float] | list[float]) -> ColorSwap:
        """Swap the colour filter for ``rgb`` weights (e.g. ``COLOR_PRESETS["green"]``) without a compiler."""
        t0 = time.perf_counter()
        if self._filter is None:
            raise ConfigError(f"template {self.template.name} tracks brightness (1 channel); set_color "
                              f"needs a colour template")
        values, clipped = quantize_color(rgb, self.filter_scale)
        int8 = np.array([[[values]]], dtype=np.int8)  # the twin filter's shape; owns its data, so the
        # parameter set's array is frozen once published (SpotValidity finds it by identity)
        store = self.runner.store
        pc = store.current.blobs.get("pc")
        blobs = None if pc is None else {"pc": make_patch(pc, FILTER_OFFSETS, int8)}
        published = store.publish(blobs=blobs, twin={self._filter.index: int8})
        return ColorSwap(published.version, values, clipped, self.filter_scale,
                         (time.perf_counter() - t0) * 1e6)

    def details(self) -> dict[str, Any]:
        return {"variant": self.variant, "color": self.color, "filter_scale": self.filter_scale,
                "mode": self.mode}
