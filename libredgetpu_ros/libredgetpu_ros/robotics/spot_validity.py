"""Is there one compact target? The spot tracker's validity, decided on the CPU from the frame it sent.

The spot template ends in ``SOFTMAX -> soft argmax`` over the colour response (``ReLU(w . rgb)``; the bright
variant: luma). Its softmax takes the response in grey levels (input scale ~1, beta 1), so it is nearly an
argmax over the cells within a few grey levels of the peak, and its output is int8 with a step of 1/256: a
cell holding less than 1/512 of the mass rounds to zero. The device therefore answers confidently in three
cases where no answer exists: a frame with no target (every cell ties: the mass spreads over all of them,
rounds to zero and the decode reads (0, -1), "up"), a target covering more than ~500 cells (the same
underflow) and two targets (the soft argmax lands between them).

:class:`SpotValidity` recomputes what the device saw, on the template's input (H x W, 64 x 64 or 128 x 128)
with the current filter weights: the response quantized as the model does, the softmax and its int8 rounding
(``mass``: the share of the soft argmax's weight the device kept). From the response it also measures the
target: the connected region around the peak above half the peak's contrast over the frame's median
(``coverage``: its share of the cells), and the strongest response outside it (``margin``). Reasons, in the
order they are tested:

- ``no_target``: the peak is less than ``min_contrast`` grey levels over the median;
- ``target_too_large``: the median cell itself responds (opponent colour filters, whose weights sum to <= 0:
  more than half the frame has the colour) or the region covers ``max_coverage`` of the frame or more;
- ``ambiguous``: another region comes within ``min_margin`` grey levels of the peak;
- ``spread``: the device kept less than ``min_mass`` of the softmax mass (its offset is pulled towards (0, -1)
  by the lost share).

Cost: one compiled call per frame, its decision included: a pass over the H x W x C input, a histogram of
the response levels and a flood fill of the target region (robotics/spot_kernels.py; the NumPy path without
numba), bench/results/robotics_frames.md. :meth:`SpotValidity.frame` is the tracker's frame path (a frame
as ``fit`` makes it, the filter's constants packed once: :meth:`SpotValidity.consts`),
:meth:`SpotValidity.measure` the same for any layout; :meth:`SpotValidity.check` wraps it in a
:class:`SpotEvidence`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.backends.base import tensor_spec
from libredgetpu_ros.errors import ConfigError, ModelFormatError
from libredgetpu_ros.robotics import spot_kernels

REASONS = spot_kernels.REASONS  # ("ok", "no_target", "target_too_large", "ambiguous", "spread")
_RING = np.ones((3, 3), np.uint8)  # the target region grown by one cell: its own blurred edge is not a rival


@dataclass(frozen=True, slots=True)
class SpotEvidence:
    """What the CPU check found in one frame (see the module docstring)."""

    valid: bool
    reason: str
    coverage: float  # share of the frame's cells in the target region
    mass: float  # share of the softmax mass the device's int8 output kept (1: nothing lost)
    contrast: float  # peak response over the median, grey levels
    margin: float  # peak response over the strongest response outside the target region, grey levels

    def to_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "reason": self.reason, "coverage": self.coverage, "mass": self.mass,
                "contrast": self.contrast, "margin": self.margin}


@dataclass(frozen=True)
class ValidityLimits:
    min_contrast: float = 40.0
    max_coverage: float = 0.25
    min_margin: float = 20.0
    min_mass: float = 0.9

    def __post_init__(self) -> None:
        if not (self.min_contrast > 0 and 0 < self.max_coverage <= 1 and self.min_margin >= 0
                and 0 < self.min_mass <= 1):
            raise ConfigError(f"spot validity limits out of range: {self}")


def _frozen(array: np.ndarray) -> bool:
    """Whether nothing can change ``array``'s values: it and every array under it are read-only and the chain
    ends in an array owning its data or in ``bytes`` (a model file's buffer). A read-only view of a writable
    array is not: its owner can still change it. (An owner's own flag can be set writable again: a caller
    doing that to a parameter set's array breaks the set's read-only contract, not only this cache.)"""
    while not array.flags.writeable:
        base = array.base
        if base is None:
            return True
        if isinstance(base, np.ndarray):
            array = base
            continue
        if isinstance(base, memoryview):
            base = base.obj
        return isinstance(base, bytes)
    return False


class SpotValidity:
    """The check of one spot template (its quantization read from the twin: conv output and softmax)."""

    def __init__(self, template: Any, limits: ValidityLimits | None = None,
                 kernels: bool = True) -> None:
        self.limits = limits or ValidityLimits()
        ops = {op.opcode_name: op for op in template.twin.operators}
        softmax = ops.get("SOFTMAX")
        if softmax is None:
            raise ModelFormatError(f"{template.twin_path}: no SOFTMAX op; not a spot template")
        src = tensor_spec(template.twin.tensors[softmax.inputs[0]])
        out = tensor_spec(template.twin.tensors[softmax.outputs[0]])
        self._in_scale, self._in_zero = float(src.scale), int(src.zero_point)
        self._out_scale, self._out_zero = float(out.scale), int(out.zero_point)
        self._beta = float((softmax.builtin_options or {}).get("beta", 1.0))
        self.height, self.width, self.channels = template.image_shape
        # the real value of each response level (int8 value + 128), computed as the NumPy path computes it
        # per cell (read-only: the kernel's argument on every frame)
        self.real_of = (np.arange(-128, 128).astype(np.float32) - self._in_zero) * self._in_scale
        self.real_of.setflags(write=False)
        self._bright = self._pack(None, False)
        # the last filter's (weights array when nothing can change it, scale, weights' bytes, constants): one
        # tuple, so a concurrent swap never mixes two filters; a parameter set's frozen array is found by
        # identity (a read-only view of a writable array is not frozen: its owner can still change it)
        self._filter_cache: tuple[Any, Any, bytes, np.ndarray] = (None, None, b"", self._bright)
        # one compiled call (robotics/spot_kernels.py), compiled or loaded now; the NumPy path without numba
        self.kernels = kernels and spot_kernels.warm_up()
        # the softmax weight of each (peak level, level) pair, read-only (the kernel's argument every frame)
        self.exps = spot_kernels.exp_table(self.real_of, self._beta) if self.kernels else None
        if self.exps is not None:
            self.exps.setflags(write=False)

    def _pack(self, real_weights: np.ndarray | None, opponent: bool) -> np.ndarray:
        limits = self.limits
        return spot_kernels.pack(real_weights, self._in_scale, self._in_zero, self._beta, self._out_scale,
                                 self._out_zero, (limits.min_contrast, limits.max_coverage,
                                                  limits.min_margin, limits.min_mass), opponent)

    def consts(self, weights: np.ndarray | None, weight_scale: float | None) -> np.ndarray:
        """What :meth:`measure` needs of a filter (the int8 weights the device ran with and their scale; None
        for the bright variant): its real weights as ``response`` makes them (float32), whether the int8
        weights sum to <= 0 (an opponent filter) and the limits, packed once and kept while the filter
        stays (read-only, shared by every frame). A frame of a tracker costs an identity test: the weights
        it passes are its parameter set's frozen array (:func:`_frozen`); other arrays are compared by
        their bytes."""
        if weights is None:
            return self._bright
        cached = self._filter_cache
        if weights is cached[0] and weight_scale == cached[1]:
            return cached[3]
        array = np.asarray(weights)
        key = array.tobytes()
        if key == cached[2] and weight_scale == cached[1]:
            consts = cached[3]
        else:
            real = np.asarray(array, np.float32).reshape(-1) * np.float32(weight_scale)
            consts = self._pack(real, int(np.sum(array)) <= 0)
        self._filter_cache = (array if _frozen(array) else None), weight_scale, key, consts
        return consts

    def response(self, fitted: np.ndarray, weights: np.ndarray | None,
                 weight_scale: float | None) -> np.ndarray:
        """The softmax's int8 input (H, W) as the model computes it: luma for the bright variant, else
        ``ReLU(sum(w * rgb))`` requantized to the conv output's scale (round half away from zero)."""
        return self._response(fitted, self.consts(weights, weight_scale))

    def _response(self, fitted: np.ndarray, consts: np.ndarray) -> np.ndarray:
        pixels = np.asarray(fitted).reshape(self.height, self.width, self.channels)
        if not consts[spot_kernels.C_COLOUR]:
            return (pixels[..., 0].astype(np.int32) - 128).astype(np.int8)
        real_weights = consts[spot_kernels.C_W0:spot_kernels.C_W2 + 1].astype(np.float32)  # exact
        acc = pixels.astype(np.float32) @ real_weights
        q = np.floor(np.maximum(acc, 0.0) / np.float32(self._in_scale) + 0.5) + self._in_zero
        return np.clip(q, -128, 127).astype(np.int8)

    def check(self, fitted: np.ndarray, weights: np.ndarray | None = None,
              weight_scale: float | None = None) -> SpotEvidence:
        """The evidence of one frame (the template's input as the device got it) with the filter weights the
        device ran with (None for the bright variant)."""
        reason, coverage, mass, contrast, margin = self.measure(fitted, self.consts(weights, weight_scale))
        return SpotEvidence(reason == spot_kernels.OK, REASONS[reason], coverage, mass, contrast, margin)

    def frame(self, fitted: np.ndarray, weights: np.ndarray | None,
              weight_scale: float | None) -> tuple[int, float, float, float, float]:
        """:meth:`measure` of a frame ``RoboticsModule.fit`` made (a C-contiguous uint8 (H, W, C) array,
        taken as it is) with the filter weights the device ran with (:meth:`consts`): the tracker's call."""
        consts = self.consts(weights, weight_scale)
        if self.kernels:
            return spot_kernels.evidence(fitted, self.real_of, consts, self.exps)
        return self.measure(fitted, consts)

    def measure(self, fitted: np.ndarray, consts: np.ndarray) -> tuple[int, float, float, float, float]:
        """(reason index in REASONS, coverage, mass, contrast, margin) of one frame: the frame path.
        ``fitted`` is the template's input image (taken as it is when it is the C-contiguous uint8 (H, W, C)
        array ``RoboticsModule.fit`` makes), ``consts`` the filter's (:meth:`consts`)."""
        array = np.asarray(fitted)
        if self.kernels and array.dtype == np.uint8:  # else the NumPy path below
            shape = (self.height, self.width, self.channels)
            if array.shape != shape or not array.flags.c_contiguous:
                array = np.ascontiguousarray(array).reshape(shape)  # a wrong size is a ValueError
            return spot_kernels.evidence(array, self.real_of, consts, self.exps)
        peak, base, mass, coverage, rival = self._measure(fitted, consts)
        limits = self.limits
        reason, coverage, contrast, margin = spot_kernels.plain(spot_kernels.decide)(
            peak, base, mass, coverage, 0.0 if rival is None else rival, rival is not None,
            bool(consts[spot_kernels.C_OPPONENT]), limits.min_contrast, limits.max_coverage,
            limits.min_margin, limits.min_mass)
        return reason, coverage, mass, contrast, margin

    def _measure(self, fitted: np.ndarray,
                 consts: np.ndarray) -> tuple[float, float, float, float, float | None]:
        """(peak, median, mass, coverage, rival) in NumPy (the reference of robotics/spot_kernels.py);
        coverage 0 and rival None when the contrast is below ``min_contrast`` (not measured)."""
        import cv2

        q = self._response(fitted, consts)
        real = (q.astype(np.float32) - self._in_zero) * self._in_scale
        flat = real.reshape(-1)
        peak, base = float(flat.max()), float(np.median(flat))
        logits = self._beta * (flat - peak)
        p = np.exp(logits.astype(np.float64))
        p /= p.sum()
        kept = np.clip(np.floor(p / self._out_scale + 0.5) + self._out_zero, -128, 127) - self._out_zero
        mass = float(kept.sum() * self._out_scale)
        contrast = peak - base
        if contrast < self.limits.min_contrast:
            return peak, base, mass, 0.0, None
        above = (real >= base + contrast / 2).astype(np.uint8)
        _, labels = cv2.connectedComponents(above, connectivity=8)
        peak_at = int(np.argmax(flat))
        region = labels.reshape(-1) == labels.reshape(-1)[peak_at]
        coverage = float(region.mean())
        grown = cv2.dilate(region.reshape(self.height, self.width).astype(np.uint8), _RING)
        outside = flat[grown.reshape(-1) == 0]
        return peak, base, mass, coverage, float(outside.max()) if outside.size else None
