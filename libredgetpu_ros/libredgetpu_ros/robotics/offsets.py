"""The trackers' output: a soft-argmax position as an (x, y) offset from the image centre in [-1, 1].

Both the spot and the pattern template end in ``SOFTMAX -> FC(x grid) , FC(y grid) -> CONCAT`` with int8
output ``[1, 2]``. The grids carry the temperature (coordinates / temperature) and the y grid a constant
``y_offset`` (so x and y get different quantization ranges); decoding undoes both:

    x = (q[0] - zp) * scale * temperature,   y = ((q[1] - zp) * scale - y_offset) * temperature

with ``scale`` / ``zp`` from the model's output tensor and ``temperature`` / ``y_offset`` from the sidecar
(LibrEdgeTPU's ``_decode_tracker_output``). x grows to the right, y downwards.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from libredgetpu_ros.backends.base import TensorSpec
from libredgetpu_ros.errors import ModelFormatError


class TrackResult(NamedTuple):
    """Where the target is: offsets from the centre in [-1, 1] (x right, y down), and the parameter version
    that found it.

    ``valid`` says whether a controller may act on it; when it is false ``x_offset`` / ``y_offset`` are None,
    the servo error is zero and ``reason`` says why (the modules' checks: robotics/spot_validity.py,
    robotics/ncc.py). ``measured`` keeps what the template's output decodes to either way (LibrEdgeTPU's
    reading; in the ``libredgetpu`` mode nothing is checked, ``reason`` is "unchecked"). Immutable: a named
    tuple, made once per frame (a frozen dataclass set its ten fields one call each)."""

    x_offset: float | None
    y_offset: float | None
    raw: tuple[int, int]  # the int8 outputs the offsets were decoded from
    version: int  # parameter version (colour / template) the frame ran with
    valid: bool = True
    reason: str = "unchecked"
    coverage: float | None = None  # spot: share of the frame the target region covers
    mass: float | None = None  # spot: share of the softmax mass the device's output kept
    score: float | None = None  # pattern: normalised correlation at the match, [-1, 1]
    measured: tuple[float, float] | None = None  # the decoded output, also when not valid

    def servo_error(self, gain: float = 1.0) -> tuple[float, float]:
        """Error to drive to zero: the negated offset times ``gain`` (steer towards the target); zero when
        the result is not valid (no target: no command)."""
        if not self.valid or self.x_offset is None or self.y_offset is None:
            return 0.0, 0.0
        return -self.x_offset * gain, -self.y_offset * gain

    def direction(self, threshold: float = 0.1) -> str:
        if not self.valid or self.x_offset is None or self.y_offset is None:
            return "none"
        return offset_to_direction(self.x_offset, self.y_offset, threshold)

    def invalidated(self, reason: str, **evidence: Any) -> TrackResult:
        """This result with no offset (not valid, ``reason``), the decoded output kept in ``measured``."""
        return self._replace(x_offset=None, y_offset=None, valid=False, reason=reason, **evidence)

    def to_dict(self) -> dict[str, Any]:
        out = {"x_offset": self.x_offset, "y_offset": self.y_offset, "direction": self.direction(),
               "valid": self.valid, "reason": self.reason, "raw": list(self.raw), "version": self.version}
        for key in ("coverage", "mass", "score"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if not self.valid and self.measured is not None:
            out["measured"] = list(self.measured)
        return out


def offset_to_direction(x_offset: float, y_offset: float, threshold: float = 0.1) -> str:
    """"center", "left", "up-right", ...: each axis counts once its offset reaches ``threshold``."""
    x_dir = "" if abs(x_offset) < threshold else ("right" if x_offset > 0 else "left")
    y_dir = "" if abs(y_offset) < threshold else ("down" if y_offset > 0 else "up")
    return "-".join(d for d in (y_dir, x_dir) if d) or "center"


_new_tuple = tuple.__new__


class OffsetDecoder:
    """Decodes the int8 ``[1, 2]`` output of a tracker template (see the module docstring)."""

    def __init__(self, output: TensorSpec, temperature: float, y_offset: float) -> None:
        if output.dtype != np.int8 or int(np.prod(output.shape)) != 2:
            raise ModelFormatError(f"tracker output {output.name!r} is {output.dtype} {output.shape}; "
                                   f"expected int8 with 2 values (x, y)")
        if not temperature > 0:
            raise ModelFormatError(f"tracker temperature must be > 0, got {temperature}")
        self.output = output
        self.temperature = float(temperature)
        self.y_offset = float(y_offset)
        self._scale = np.float32(output.scale)
        self._zero = np.float32(output.zero_point)
        # the decoded x and y of every int8 output value (index q + 128): a frame costs two look-ups
        real = (np.arange(-128, 128).astype(np.float32) - self._zero) * self._scale
        self._x_of = tuple(float(r) * self.temperature for r in real)
        self._y_of = tuple((float(r) - self.y_offset) * self.temperature for r in real)

    def offsets(self, raw: np.ndarray) -> tuple[int, int, float, float]:
        """(q_x, q_y, x, y): the two int8 outputs and what they decode to (module docstring)."""
        qx, qy = np.asarray(raw).ravel().tolist()  # ravel: the cheaper call of the two
        return qx, qy, self._x_of[qx + 128], self._y_of[qy + 128]

    def decode(self, raw: np.ndarray, version: int = 0, valid: bool = True, reason: str = "unchecked",
               coverage: float | None = None, mass: float | None = None) -> TrackResult:
        """The result of one output: its offsets, or none when a check found it not ``valid`` (``reason``;
        the decoded output kept in ``measured`` either way), and the check's evidence."""
        qx, qy, x, y = self.offsets(raw)
        # every field given: the tuple made directly, without the named tuple's __new__ call
        if valid:
            return _new_tuple(TrackResult, (x, y, (qx, qy), version, True, reason, coverage, mass, None,
                                            (x, y)))
        return _new_tuple(TrackResult, (None, None, (qx, qy), version, False, reason, coverage, mass, None,
                                        (x, y)))

    def grid_position(self, result: TrackResult, grid_width: int, grid_height: int) -> tuple[float, float]:
        """The decoded output as (column, row) on the soft-argmax grid (``(n - 1) / 2 * (1 + offset)``)."""
        x, y = result.measured if result.measured is not None else (result.x_offset, result.y_offset)
        return ((grid_width - 1) / 2 * (1 + x), (grid_height - 1) / 2 * (1 + y))
