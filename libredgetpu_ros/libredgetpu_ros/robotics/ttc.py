"""Time to contact in seconds from the expansion of the centre of the image (the looming module's CPU side).

Model. A surface straight ahead at depth Z(t), approached at a constant speed v, is seen at an image scale
proportional to 1 / Z. Between a reference frame at t - D and the frame at t the centre region is scaled by

    s = Z(t - D) / Z(t) = (Z(t) + v D) / Z(t) = 1 + D / TTC(t),   so   TTC(t) = D / (s - 1),

exactly, with no lag, for any span D (tested against rendered approaches, test/robotics/test_ttc.py). s is
measured by registering the reference frame's centre window onto the current frame with a similarity warp
about the image centre plus light, x' = c + s (x - c) + (tx, ty), I_t(x') = g I_ref(x) + b: Gauss-Newton
with Tukey-weighted residuals (iteratively reweighted: an edge of the background moving differently is
voted out; the weights' yardstick the first residuals' MAD), on the frames blurred (sigma 1), starting at
the last good scale carried to this frame (``s - 1 = span / TTC``, the TTC fallen by the time since), no
shift and no lighting change. Translation is part of the model, so a lateral motion does not read as an
expansion; gain and bias are, so a lighting change does not either.

A TTC is reported only with enough evidence, else ``ttc_s`` is None and ``reason`` says why:

- ``filling``: the history spans less than ``min_span_s`` (after a start, a gap or a reset);
- ``low_texture``: the reference's centre window's mean squared gradient (of the blurred frame) is below
  ``min_texture``;
- ``poor_fit``: the registration explains too little (weighted residual over ``max_residual`` of the
  window's standard deviation, or most pixels voted out);
- ``not_approaching``: ``s - 1`` is not ``min_sigmas`` standard errors above zero (static, receding,
  lateral), or the TTC is beyond ``max_ttc_s``.

Stamps going backwards, gaps longer than ``max_gap_s`` and a frame of another size clear the history (no
TTC until it refills).
Everything runs on the frame's stamps, never the wall clock, so a bag replay gives what the live run gave.
Cost: per frame one blur (its gradients and the window's texture in the same call), per Gauss-Newton step
two passes over a window of ~1,500 pixels at 64 x 64 (the warp with the residuals; the weights and the
5 x 5 normal equations), compiled in robotics/looming_kernels.py (OpenCV and NumPy here without numba);
bench/results/robotics_frames.md.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from libredgetpu_ros.errors import ConfigError, InputError
from libredgetpu_ros.robotics import flow_refine, looming_kernels

REASONS = ("ok", "filling", "low_texture", "poor_fit", "not_approaching")


@dataclass(frozen=True)
class TtcSettings:
    window_frac: float = 0.6  # side of the centre window, share of the image side
    span_s: float = 0.3  # the reference frame is the oldest one at most this long ago
    min_span_s: float = 0.1  # ... and at least this long ago
    max_gap_s: float = 0.5  # a longer gap between frames clears the history
    min_texture: float = 20.0  # mean squared gradient (grey levels^2 per pixel^2) of the centre window
    max_residual: float = 0.5  # weighted residual RMS / window standard deviation
    min_sigmas: float = 5.0  # s - 1 must exceed this many standard errors
    max_ttc_s: float = 5.0
    iterations: int = 12

    def __post_init__(self) -> None:
        if not (0.1 <= self.window_frac <= 1.0 and 0 < self.min_span_s <= self.span_s and self.max_gap_s > 0
                and self.min_texture >= 0 and self.max_residual > 0 and self.min_sigmas > 0
                and self.max_ttc_s > 0 and self.iterations >= 1):
            raise ConfigError(f"TTC settings out of range: {self}")


@dataclass(frozen=True, slots=True)
class TtcEstimate:
    ttc_s: float | None
    reason: str
    scale: float | None  # s: centre-window scale from the reference frame to this one
    span_s: float | None  # D: time from the reference frame
    sigma: float | None  # standard error of s - 1

    @property
    def valid(self) -> bool:
        return self.ttc_s is not None

    def to_dict(self) -> dict[str, Any]:
        return {"ttc_s": self.ttc_s, "ttc_valid": self.valid, "ttc_reason": self.reason, "scale": self.scale,
                "span_s": self.span_s}


def _tukey(residual: np.ndarray, scale: float) -> np.ndarray:
    u = residual * np.float32(1.0 / (4.685 * max(scale, 1e-6)))
    return np.square(np.maximum(np.float32(1.0) - u * u, np.float32(0.0)))


def register_scale(ref: np.ndarray, cur: np.ndarray, half: int, iterations: int = 12,
                   start: float = 0.0) -> tuple[float, float, float, float]:
    """(s - 1, its standard error, residual RMS / window std, share of pixels kept) of the similarity warp
    taking ``ref``'s centre window (``2 half + 1`` pixels a side) onto ``cur`` (float32 images, one size),
    starting from ``s - 1 = start``, no shift and no lighting change."""
    import cv2

    h, w = ref.shape
    cy, cx = (h - 1) / 2.0, (w - 1) / 2.0
    y0, x0 = int(cy - half + 0.5), int(cx - half + 0.5)
    template = ref[y0:y0 + 2 * half + 1, x0:x0 + 2 * half + 1]
    ys, xs = np.mgrid[0:2 * half + 1, 0:2 * half + 1].astype(np.float32)
    xs_c, ys_c = xs + np.float32(x0 - cx), ys + np.float32(y0 - cy)  # window pixels from the image centre
    rx, ry = xs_c.reshape(-1), ys_c.reshape(-1)
    # the image and its gradients as one 3-channel image: one remap per iteration warps all three
    stack = cv2.merge([cur, cv2.Sobel(cur, cv2.CV_32F, 1, 0, ksize=3, scale=1 / 8),
                       cv2.Sobel(cur, cv2.CV_32F, 0, 1, ksize=3, scale=1 / 8)])
    t = template.reshape(-1).astype(np.float32)
    std = float(t.std()) or 1.0
    ones = np.ones_like(t)
    a, tx, ty, gain, bias = start, 0.0, 0.0, 1.0, 0.0
    scale = None
    jac = np.empty((t.size, 5), np.float32)
    for _ in range(iterations):
        mx = np.float32(1 + a) * xs_c + np.float32(cx + tx)
        my = np.float32(1 + a) * ys_c + np.float32(cy + ty)
        warped = cv2.remap(stack, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT).reshape(-1, 3)
        residual = warped[:, 0] - (gain * t + bias)
        if scale is None:  # robust scale of the first residuals (MAD), kept: the weights' yardstick
            dev = np.abs(residual - np.median(residual))
            scale = max(1.4826 * float(np.median(dev)), 0.5)
        weights = _tukey(residual, scale)
        wx, wy = warped[:, 1], warped[:, 2]
        jac[:, 0] = wx * rx + wy * ry
        jac[:, 1], jac[:, 2], jac[:, 3], jac[:, 4] = wx, wy, -t, -ones
        jw = jac * weights[:, None]
        normal = (jw.T @ jac).astype(np.float64)
        try:
            step = np.linalg.solve(normal + 1e-9 * np.eye(5), -(jw.T @ residual).astype(np.float64))
        except np.linalg.LinAlgError:
            return 0.0, math.inf, math.inf, 0.0
        a, tx, ty = a + float(step[0]), tx + float(step[1]), ty + float(step[2])
        gain, bias = gain + float(step[3]), bias + float(step[4])
        if abs(a) > 0.9 or abs(tx) > half or abs(ty) > half:
            return float(a), math.inf, math.inf, 0.0
        if abs(step[0]) < 1e-4 and abs(step[1]) < 1e-2 and abs(step[2]) < 1e-2:
            break
    kept = float(weights.mean())
    var = float((weights * residual * residual).sum() / max(float(weights.sum()) - 5.0, 1.0))
    try:
        sigma_a = math.sqrt(max(var * float(np.linalg.inv(normal)[0, 0]), 0.0))
    except np.linalg.LinAlgError:
        sigma_a = math.inf
    return float(a), sigma_a, math.sqrt(var) / std, kept


_UINT8 = np.dtype(np.uint8)
_TAPS = flow_refine.SMOOTH_TAPS  # the compiled blur's: flow_refine.smooth's Gaussian


class ScaleTtc:
    """The estimator over a stamped frame sequence (see the module docstring)."""

    def __init__(self, settings: TtcSettings | None = None, kernels: bool = True) -> None:
        self.settings = settings or TtcSettings()
        # the frame's blur and gradients and the registration compiled (robotics/looming_kernels.py),
        # compiled or loaded now; OpenCV and NumPy without numba
        self.kernels = kernels and looming_kernels.warm_up()
        # (stamp, texture, blurred frame, its gradients x and y) per frame
        self._history: deque[tuple[float, float, np.ndarray, np.ndarray, np.ndarray]] = deque()
        self._spare: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # frames left the history: reused
        # the last good registration's s - 1 (where the next one starts), its span and stamp
        self._last_a = 0.0
        self._last_span = self._last_stamp = 0.0
        self._geometry: tuple[tuple[int, ...], tuple[int, int, int, int]] = ((), (0, 0, 0, 0))

    def reset(self) -> None:
        self._spare.extend(frame[2:] for frame in self._history)
        self._history.clear()
        self._last_a = 0.0

    @property
    def samples(self) -> int:
        return len(self._history)

    def _smooth(self, gray: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """The frame's texture (the centre window's mean squared gradient, read when the frame becomes a
        reference), the frame blurred (sigma 1) and its Sobel gradients / 8 (flow_refine.smooth): compiled
        in one call into the arrays of a frame that left the history, else by flow_refine.smooth. A frame
        that is not 2-D and numeric, or holds NaN or inf, is refused (InputError) before the history
        changes."""
        gray = np.asarray(gray)
        dtype = gray.dtype
        if dtype != _UINT8:  # a uint8 frame (the template's input) needs no check and no conversion
            if gray.ndim != 2 or dtype.kind not in "uif":
                raise InputError(f"a grey frame must be a 2-D numeric array, got {dtype} {gray.shape}")
            if not np.isfinite(gray).all():
                raise InputError("the grey frame contains NaN or inf")  # the selection's bins assume finite
            gray = gray.astype(np.float32, copy=False)
        elif gray.ndim != 2:
            raise InputError(f"a grey frame must be a 2-D numeric array, got {dtype} {gray.shape}")
        shape = gray.shape
        _, y0, x0, side = self._window(shape)
        if not self.kernels or shape[0] <= 4 or shape[1] <= 4:
            image, grad_x, grad_y = flow_refine.smooth(np.asarray(gray, dtype=np.float32))
            window = (slice(y0, y0 + side), slice(x0, x0 + side))
            texture = float(np.mean(np.square(grad_x[window], dtype=np.float32)
                                    + np.square(grad_y[window], dtype=np.float32)))
            return texture, image, grad_x, grad_y
        if not gray.flags.c_contiguous:
            gray = np.ascontiguousarray(gray)
        spare = self._spare
        while spare and spare[-1][0].shape != shape:
            spare.pop()  # the frame size changed
        image, grad_x, grad_y = spare.pop() if spare else (np.empty(shape, np.float32), np.empty(
            shape, np.float32), np.empty(shape, np.float32))
        texture = looming_kernels.smooth(gray, _TAPS, image, grad_x, grad_y, y0, x0, side)
        return texture, image, grad_x, grad_y

    def _window(self, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
        """(half, y0, x0, side) of the centre window of frames of this shape (kept for the last shape)."""
        if self._geometry[0] != shape:
            half = max(4, int(self.settings.window_frac * min(shape) / 2))
            self._geometry = (shape, (half, shape[0] // 2 - half, shape[1] // 2 - half, 2 * half + 1))
        return self._geometry[1]

    def _start(self, span: float, stamp_s: float) -> float:
        """Where the registration starts: the last good scale carried to this frame. At a steady approach
        ``s - 1 = span / TTC`` and the TTC has fallen by the time since, so an approach starts at the scale
        it should find (measured: fewer steps, and a fast approach's 90th-percentile error lower); anything
        else, or a prediction more than twice the last scale, starts at the last scale."""
        if self._last_a > 0.0:
            ttc = self._last_span / self._last_a - (stamp_s - self._last_stamp)
            if ttc > 0.0 and span / ttc <= 2.0 * self._last_a * span / self._last_span:
                return span / ttc
        return self._last_a

    def update(self, gray: np.ndarray, stamp_s: float) -> TtcEstimate:
        if not math.isfinite(stamp_s):
            raise InputError(f"stamp {stamp_s} must be finite")
        st = self.settings
        texture, image, grad_x, grad_y = self._smooth(gray)  # a bad frame refused here: history kept
        if self._history:
            last, _, previous, _, _ = self._history[-1]
            if stamp_s <= last or stamp_s - last > st.max_gap_s or previous.shape != image.shape:
                self.reset()  # time went backwards (bag loop, clock reset), a gap, or another frame size
        self._history.append((float(stamp_s), texture, image, grad_x, grad_y))
        while len(self._history) > 2 and stamp_s - self._history[1][0] >= st.span_s:
            self._spare.append(self._history.popleft()[2:])
        ref_stamp, ref_texture, ref, _, _ = self._history[0]
        span = stamp_s - ref_stamp
        if span < st.min_span_s:
            return TtcEstimate(None, "filling", None, span if len(self._history) > 1 else None, None)
        if ref_texture < st.min_texture:  # the reference window's mean squared gradient
            return TtcEstimate(None, "low_texture", None, span, None)
        half = self._window(image.shape)[0]
        # from the last scale carried forward, no shift, no lighting change: starting from the last shift
        # too saves steps on a lateral motion but can settle a scene of two motions (a near target passing
        # over its backdrop) on a confident wrong expansion
        start = self._start(span, stamp_s)
        if self.kernels:
            a, sigma, rel, kept = looming_kernels.register_scale(ref, image, grad_x, grad_y, half,
                                                                 st.iterations, start)
        else:
            a, sigma, rel, kept = register_scale(ref, image, half, st.iterations, start)
        scale = 1.0 + a
        if not math.isfinite(sigma) or rel > st.max_residual or kept < 0.5:
            self._last_a = 0.0
            return TtcEstimate(None, "poor_fit", scale, span, sigma)
        self._last_a, self._last_span, self._last_stamp = a, span, stamp_s
        if a <= st.min_sigmas * sigma or span / a > st.max_ttc_s:
            return TtcEstimate(None, "not_approaching", scale, span, sigma)
        return TtcEstimate(span / a, "ok", scale, span, sigma)
