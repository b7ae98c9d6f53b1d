"""OpticalFlow: one global image-plane motion ``(vx, vy)`` between consecutive grayscale frames.

The Gabor template (``gabor_<N>x<N>_7k_4o_2s`` or the pooled ``gabor_<N>x<N>_p4``: 8 Gabor filters, 7×7,
4 orientations × 2 scales, ReLU; ``p4`` adds a 4×4 average pool on the chip) runs on the Edge TPU or its CPU
twin through the backend interface. Everything after it is NumPy (:mod:`robotics.correlation`): block-sum
pooling (standard template), correlation over the ``±search_range`` displacement grid, and the peak.

Two modes:

- ``"libredgetpu"``: LibrEdgeTPU's ``OpticalFlow`` formulas exactly (raw frame in; zero point removed; block
  sum; raw correlation divided by the overlap's element count; soft argmax at ``temperature``). Kept for the
  exactness test and for comparison. Its weaknesses, measured on the 64×64 twin: the all-positive ReLU
  features make the correlation follow their mean (diagonal shifts read short, half-contrast scenes read ≈ 0),
  and the soft argmax over raw scores at 0.1 is a hard argmax (whole grid steps).
- ``"normalized"`` (default): each frame is stretched to a fixed contrast before the model (mean 128,
  ``CONTRAST_GAIN`` grey levels per standard deviation), features lose their per-channel mean, scores are
  the normalised cross-correlation over each overlap (in [-1, 1]), and the peak is refined by a Gaussian
  fit (``correlation.refine_offset``). A frame pair gives ``valid=False``
  when either frame is too flat (``min_texture``, grey-level standard deviation)
  or the best score is weak (``min_confidence``) or not distinct from another displacement (``min_margin``:
  stripes, repeated patterns) rather than a confident wrong motion. Frame-border cells are left out (the
  7×7 kernels see the zero padding there as an edge that does not move).

With ``refine`` (default in the normalised mode) the device's best peaks are refined at the frame's own
resolution (:mod:`robotics.flow_refine`) and the pair is valid when the frames match there (``min_match``),
no other peak matches as well (a repeating scene: ``ambiguous``) and the refined motion is inside the search
range (else ``saturated``, not valid): slow motion in camera-sized frames reads true instead of short.

Without it, motion larger than the grid saturates: the peak sits on the grid's edge (``saturated=True``) and
the value is the edge (``±search_range`` grid steps), never beyond. One grid step is the pool factor in
model-input pixels; results are given in pixels of the frames passed in (resized to the model's input
internally).

Video costs one accelerator call per frame: :meth:`OpticalFlow.step` keeps the features of the previous
frame for the next pair (LibrEdgeTPU computes both frames of every pair).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import cv2
import numpy as np

from libredgetpu_ros.errors import ConfigError, ImageError, ModelFormatError
from libredgetpu_ros.robotics import flow_kernels, flow_refine
from libredgetpu_ros.robotics.base import RoboticsModule
from libredgetpu_ros.robotics.correlation import CorrelationGrid, Peak, block_sum, refined_peak, soft_argmax
from libredgetpu_ros.robotics.image import fit_image, to_gray
from libredgetpu_ros.robotics.template import TemplateRunner, load_template

__all__ = ["FlowFeatures", "FlowMode", "FlowResult", "OpticalFlow", "flow_to_direction"]

FlowMode = Literal["normalized", "libredgetpu"]
MODES: tuple[str, ...] = ("normalized", "libredgetpu")

CONTRAST_GAIN = 48.0  # grey levels per standard deviation after normalisation: ±2.6 σ fill 0..255
DEFAULT_MIN_TEXTURE = 4.0  # grey-level standard deviation below which a frame has no usable texture
DEFAULT_MIN_CONFIDENCE = 0.3  # normalised correlation of the best displacement below which a pair is unsure
# How far the best score must stand above any score outside its 3x3 neighbourhood: stripes and other
# repeating scenes give several equal peaks (measured margin 0.00); textures and photos 0.23..0.84.
DEFAULT_MIN_MARGIN = 0.1
# The templates' Gabor kernels are 7x7 (sidecar ``ksize``) with zero padding: features within 3 px of the
# frame's border see the black padding as a strong edge that does not move with the scene. The normalised
# mode leaves those cells out (with them, photos shifted by 1 grid step read 0.4 steps).
KERNEL_RADIUS = 3
# Refinement at the frame's resolution (robotics.flow_refine): a pair is valid when the frames match at the
# refined displacement with at least this normalised correlation (photos moved 2-12 px: 0.99-1.00 with
# noise; motion beyond the search range, seeded at the wrong displacement: below it, see docs/robotics.md).
DEFAULT_MIN_MATCH = 0.9
MAX_SEEDS = 3  # device peaks refined: the best and up to two others that score nearly as well
SEED_DROP = 0.1  # another local peak is a seed when within this of the best device score
ALIAS_MATCH = 0.02  # a second refined displacement matching within this of the best: a repeating scene
_LEVELS = np.arange(256, dtype=np.float32)  # the grey levels, for the contrast stretch's lookup table


class FlowFeatures(NamedTuple):
    """What is kept of one frame for the next pair: pooled features (float64; zero-mean in the normalised
    mode), the summed-area table of their per-cell energy (normalised mode), the frame's grey-level
    standard deviation and its size ``(w, h)``. ``pooled`` is None when the frame was too flat to run the
    model on. A named tuple: one is made per frame, at a third of a frozen class's cost."""

    pooled: np.ndarray | None
    energy_table: np.ndarray | None
    texture: float
    frame_size: tuple[int, int]
    fine: flow_refine.FineFrame | None = None  # the frame at the refinement's resolution


@dataclass(frozen=True, slots=True)
class FlowResult:
    """Motion of frame t+1 relative to frame t.

    ``vx``, ``vy``: pixels of the frames given (positive right / down: the scene content moved that way);
    ``vx_grid``, ``vy_grid``: the same in grid steps; ``valid``: an estimate exists; ``reason`` says why not
    (``low_texture``, ``low_confidence``, ``ambiguous``, ``saturated``, ``first_frame``, ``gap``,
    ``size_changed``, ``stamp``);
    ``confidence``: the best normalised correlation (normalised mode) or the soft argmax's largest weight
    (LibrEdgeTPU mode); ``texture``: the flatter frame's grey-level standard deviation; ``saturated``: the
    peak is on the grid's edge (motion may be larger than the grid); ``dt``: seconds between the frames'
    stamps when given (0 otherwise)."""

    vx: float
    vy: float
    vx_grid: float
    vy_grid: float
    valid: bool
    reason: str
    confidence: float
    texture: float
    saturated: bool
    dt: float = 0.0

    @classmethod
    def none(cls, reason: str, texture: float = 0.0, dt: float = 0.0) -> FlowResult:
        return cls(0.0, 0.0, 0.0, 0.0, False, reason, 0.0, texture, False, dt)

    def rate(self) -> tuple[float, float]:
        """``(vx, vy)`` per second from the stamps (0 when invalid or no stamps)."""
        if not self.valid or self.dt <= 0.0:
            return 0.0, 0.0
        return self.vx / self.dt, self.vy / self.dt

    def to_dict(self) -> dict[str, Any]:
        return {"vx": self.vx, "vy": self.vy, "vx_grid": self.vx_grid, "vy_grid": self.vy_grid,
                "valid": self.valid, "reason": self.reason, "confidence": self.confidence,
                "texture": self.texture, "saturated": self.saturated, "dt": self.dt}


def flow_to_direction(vx: float, vy: float, threshold: float = 0.3) -> str:
    """A direction word for a flow vector (``center`` below ``threshold``), as LibrEdgeTPU names them."""
    if math.hypot(vx, vy) < threshold:
        return "center"
    parts = []
    if vy < -threshold:
        parts.append("up")
    elif vy > threshold:
        parts.append("down")
    if vx < -threshold:
        parts.append("left")
    elif vx > threshold:
        parts.append("right")
    return "-".join(parts) if parts else "center"


class OpticalFlow(RoboticsModule):
    """Global optical flow on a Gabor feature template (``runner``: a ``robotics.template.TemplateRunner``).

    ``pool_factor`` applies to the standard template (CPU block sum); the pooled template's pool factor is
    read from the model (input size / output size, checked against the sidecar's ``fused_pool``) and
    ``pool_factor`` is ignored, as in LibrEdgeTPU.
    """

    MODULE = "flow"

    def __init__(self, runner: TemplateRunner, *, search_range: int = 4, temperature: float = 0.1,
                 pool_factor: int = 4, mode: str = "normalized", min_texture: float = DEFAULT_MIN_TEXTURE,
                 min_confidence: float = DEFAULT_MIN_CONFIDENCE, min_margin: float = DEFAULT_MIN_MARGIN,
                 max_gap: float = 0.0, kernels: bool = True, resize: bool = True, refine: bool = True,
                 min_match: float = DEFAULT_MIN_MATCH) -> None:
        if mode not in MODES:
            raise ConfigError(f"flow mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not temperature > 0.0:
            raise ConfigError(f"temperature must be > 0, got {temperature}")
        for name, value, low, high in (("min_texture", min_texture, 0.0, 255.0),
                                       ("min_confidence", min_confidence, -1.0, 1.0),
                                       ("min_margin", min_margin, 0.0, 2.0),
                                       ("max_gap", max_gap, 0.0, math.inf),
                                       ("min_match", min_match, -1.0, 1.0)):
            if not low <= value <= high:
                raise ConfigError(f"{name} must be in [{low}, {high}], got {value}")
        if not 1 <= search_range <= 32:
            raise ConfigError(f"search_range must be in [1, 32] grid steps, got {search_range}")
        self.runner = runner
        self.resize = bool(resize)  # frames of another size are resized (else refused)
        template = runner.template
        where = str(template.compiled_path or template.twin_path)
        if len(template.outputs) != 1:
            raise ModelFormatError(f"{where}: a flow template has one output, found {len(template.outputs)}")
        self._in, self._out = template.input, template.output
        in_shape, out_shape = self._in.shape, self._out.shape
        if (in_shape[3] != 1 or self._in.dtype != np.uint8 or len(out_shape) != 4 or out_shape[0] != 1
                or self._out.dtype != np.uint8):
            raise ModelFormatError(f"{where}: expected uint8 input [1, H, W, 1] and uint8 output "
                                   f"[1, h, w, C], got {in_shape} {self._in.dtype} and {out_shape} "
                                   f"{self._out.dtype}")
        self.height, self.width = int(in_shape[1]), int(in_shape[2])
        fused = self.height // int(out_shape[1])
        if fused * int(out_shape[1]) != self.height or fused * int(out_shape[2]) != self.width:
            raise ModelFormatError(f"{where}: output {out_shape[1]}x{out_shape[2]} does not divide the input "
                                   f"{self.height}x{self.width}")
        self.fused_pool = fused if fused > 1 else 0
        template.check_sidecar("fused_pool", self.fused_pool)
        template.check_sidecar("num_filters", int(out_shape[3]))
        # the Gabor kernels' zero padding reaches this far into the frame (see KERNEL_RADIUS)
        kernel_radius = template.int_field("ksize", 2 * KERNEL_RADIUS + 1, 1, 255) // 2
        if not self.fused_pool and not 1 <= pool_factor <= min(self.height, self.width):
            raise ConfigError(f"pool_factor must be in [1, {min(self.height, self.width)}], "
                              f"got {pool_factor}")
        self.pool_factor = int(pool_factor)
        self.grid_step = self.fused_pool or self.pool_factor  # model-input pixels per grid step
        self.channels = int(out_shape[3])
        self.mode = mode
        self.search_range, self.temperature = int(search_range), float(temperature)
        self.min_texture, self.min_confidence = float(min_texture), float(min_confidence)
        self.min_margin, self.max_gap = float(min_margin), float(max_gap)
        # sub-grid refinement at the frame's resolution (normalised mode): robotics.flow_refine
        self.refine, self.min_match = bool(refine and mode == "normalized"), float(min_match)
        # a remap of the frame at the refinement's resolution into float32 (the compass's equal-angle columns)
        self.fine_warp: Callable[[np.ndarray], np.ndarray] | None = None
        # both remaps of a frame at the model's size in one call: (warp(gray), fine_warp(gray))
        self.warp_both: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
        pooled_h, pooled_w = int(out_shape[1]), int(out_shape[2])
        if not self.fused_pool:
            pooled_h, pooled_w = self.height // self.pool_factor, self.width // self.pool_factor
        self.margin = 0 if mode == "libredgetpu" else -(-kernel_radius // self.grid_step)
        self.grid = CorrelationGrid(pooled_h - 2 * self.margin, pooled_w - 2 * self.margin, self.channels,
                                    self.search_range)
        # compiled CPU part (robotics.flow_kernels, compiled or loaded now so that the first frame costs
        # what the next ones cost) unless numba is missing or ``kernels=False`` (NumPy)
        self.kernels = bool(kernels) and flow_kernels.warm_up()
        # what a frame's compiled path needs, worked out once
        self._model_size = (self.height, self.width)
        self._feature_shape = tuple(self._out.shape[1:])
        self._stretched = np.empty(self._model_size, np.uint8)
        self._pooled_shape = (self.grid.height, self.grid.width, self.channels)
        self._table_shape = (self.grid.height + 1, self.grid.width + 1)
        self._no_table = np.empty((0, 0))
        self._pool_block = 1 if self.fused_pool else self.pool_factor
        self._zero = int(self._out.zero_point)
        self._scores = np.empty((self.grid.side, self.grid.side))
        self._counts = self.grid.overlap_counts.copy()
        self.backend_calls = 0
        # optional remap of the model-size gray frame before the model (the compass makes yaw a uniform shift)
        self.warp: Callable[[np.ndarray], np.ndarray] | None = None
        self._previous: FlowFeatures | None = None
        self._previous_stamp: float | None = None

    @classmethod
    def from_template(cls, template: str | Path = "gabor_64x64_p4", backend: str = "auto", device: Any = None,
                      folder: Path | None = None, rate_hz: float = 0.0, stream: str = "",
                      **options: Any) -> OpticalFlow:
        """OpticalFlow on a Gabor template: a name (``gabor_64x64_p4``, looked up in the fixtures'
        ``robotics`` folder or ``folder``) or any of its files (compiled, twin or sidecar)."""
        runner = TemplateRunner(load_template(template, folder), backend, device, rate_hz=rate_hz,
                                stream=stream)
        try:
            return cls(runner, **options)
        except BaseException:
            runner.close()
            raise

    @property
    def template(self) -> Any:
        """The loaded ``RoboticsTemplate``."""
        return self.runner.template

    # -- one frame -------------------------------------------------------------------------------------

    def model_frame(self, image: np.ndarray) -> np.ndarray:
        """``image`` as the model's ``H×W`` gray input (luma, area resize; see robotics.image.fit_image)."""
        return fit_image(image, self.height, self.width, 1, resize=self.resize, what="frame")[:, :, 0]

    def features(self, image: np.ndarray) -> FlowFeatures:
        """Features of one frame (one backend call; none for a frame too flat in the normalised mode)."""
        # luma once (image.to_gray; compiled, flow_kernels.warm_up warms it): the refinement's frame, and
        # resized, the model's (one-channel template: checked at open)
        frame = to_gray(image, "frame")
        if frame.shape == self._model_size:  # what fit_image returns at the model's size, without its checks
            gray = np.ascontiguousarray(frame)
        else:
            gray = fit_image(frame, self.height, self.width, 1, resize=self.resize, what="frame")[:, :, 0]
        fine_source, fine_warp = frame, self.fine_warp
        if self.warp is not None:
            if (self.warp_both is not None and self.refine and gray is frame
                    and flow_refine.fine_shape(frame) == frame.shape):  # one remap makes both frames
                gray, fine_source = self.warp_both(gray)
                fine_warp = None
            else:
                gray = self.warp(gray)
        size = (frame.shape[1], frame.shape[0])
        normalized = self.mode == "normalized"
        min_std = max(self.min_texture, 1e-3) if normalized else math.inf
        if self.kernels:  # statistics and stretch in one pass (flow_kernels.stretch: the same numbers)
            # the model input is copied into the backend by run(): one buffer serves every frame
            stretched = self._stretched
            mean, std = flow_kernels.stretch(np.ascontiguousarray(gray), CONTRAST_GAIN, min_std, stretched)
        else:
            mean, std = (float(v[0, 0]) for v in cv2.meanStdDev(gray))  # integer sums: exact mean
        if not normalized:
            model_input = gray
        elif std < min_std:
            return FlowFeatures(None, None, std, size)
        elif self.kernels:
            model_input = stretched
        else:  # each grey level stretched once (float32, rounded, clipped), then looked up per pixel
            levels = (_LEVELS - np.float32(mean)) * np.float32(CONTRAST_GAIN / std) + 128.0
            model_input = cv2.LUT(gray, np.clip(np.rint(levels), 0, 255).astype(np.uint8))
        raw = self.runner.run([model_input.reshape(self._in.shape)])[0][self._out.name]
        self.backend_calls += 1
        fine = flow_refine.fine_frame(fine_source, fine_warp) if self.refine else None
        if self.kernels:  # the backend's output has the model's shape and dtype: no checks needed
            return self._pooled(raw.reshape(self._feature_shape), std, size, fine)
        return self.from_feature_map(raw.reshape(self._feature_shape), std, size, fine)

    def from_feature_map(self, feature_map: np.ndarray, texture: float = math.inf,
                         frame_size: tuple[int, int] | None = None,
                         fine: flow_refine.FineFrame | None = None) -> FlowFeatures:
        """What is kept of a frame, from the template's raw uint8 output ``h×w×C`` (for feature maps
        computed elsewhere, e.g. to compare with LibrEdgeTPU on the same maps); ``fine``: the frame at the
        refinement's resolution, when refining."""
        expected = tuple(self._out.shape[1:])
        if feature_map.shape != expected or feature_map.dtype != np.uint8:
            raise ImageError(f"feature map must be uint8 {expected}, got {feature_map.dtype} "
                             f"{feature_map.shape}")
        size = frame_size or (self.width, self.height)
        if self.kernels:
            return self._pooled(feature_map, texture, size, fine)
        zero = int(self._out.zero_point)
        normalized = self.mode == "normalized"
        if self.fused_pool:
            pooled = feature_map.astype(np.float64) - zero
        else:
            pooled = block_sum(feature_map, self.pool_factor).astype(np.float64)
            if zero:
                pooled -= zero * self.pool_factor * self.pool_factor
        if not normalized:
            return FlowFeatures(pooled, None, texture, size, fine)
        if self.margin:
            pooled = pooled[self.margin:-self.margin, self.margin:-self.margin]
        pooled -= pooled.mean(axis=(0, 1))
        table = self.grid.energy_table(np.einsum("yxc,yxc->yx", pooled, pooled))
        return FlowFeatures(pooled, table, texture, size, fine)

    def _pooled(self, feature_map: np.ndarray, texture: float, size: tuple[int, int],
                fine: flow_refine.FineFrame | None) -> FlowFeatures:
        """from_feature_map's compiled path (one call: pool, border crop, zero mean, energy table)."""
        normalized = self.mode == "normalized"
        pooled = np.empty(self._pooled_shape)
        table = np.empty(self._table_shape) if normalized else self._no_table
        flow_kernels.pool_features(np.ascontiguousarray(feature_map), self._pool_block, self._zero,
                                   self.margin, normalized, pooled, table)
        return FlowFeatures(pooled, table if normalized else None, texture, size, fine)

    # -- a pair ----------------------------------------------------------------------------------------

    def flow(self, first: FlowFeatures, second: FlowFeatures, dt: float = 0.0) -> FlowResult:
        """Motion from the frame of ``first`` to the frame of ``second``."""
        texture = min(first.texture, second.texture)
        if first.frame_size != second.frame_size:
            return FlowResult.none("size_changed", texture, dt)
        if first.pooled is None or second.pooled is None:
            return FlowResult.none("low_texture", texture, dt)
        if self.mode == "libredgetpu":
            if self.kernels:
                gx, gy, confidence = flow_kernels.soft_argmax_peak(
                    first.pooled, second.pooled, self.search_range, self.temperature, self._counts,
                    self._scores)
            else:
                flat = (self.grid.correlate(first.pooled, second.pooled) / self.grid.overlap_counts).ravel()
                gx, gy = soft_argmax(flat, self.grid.displacements, self.temperature)
                confidence = float(1.0 / np.exp((flat - flat.max()) / self.temperature).sum())
            edge = max(abs(gx), abs(gy)) > self.search_range - 0.5
            valid, reason = texture >= self.min_texture, "" if texture >= self.min_texture else "low_texture"
            return self._result(gx, gy, valid, reason, confidence, texture, edge, dt, first.frame_size)
        if self.kernels:
            peak = Peak(*flow_kernels.normalized_peak(first.pooled, second.pooled, first.energy_table,
                                                      second.energy_table, self.search_range, self._scores))
            scores = self._scores
        else:
            scores = self.grid.correlate(first.pooled, second.pooled)
            energy_a, energy_b = self.grid.overlap_energies(first.energy_table, second.energy_table)
            scores = scores / np.sqrt(np.maximum(energy_a * energy_b, 1e-30))
            peak = refined_peak(scores)
        if first.fine is not None and second.fine is not None:
            return self._refined(first, second, scores, peak, texture, dt)
        if peak.score < self.min_confidence:
            return FlowResult.none("low_confidence", texture, dt)
        if peak.margin < self.min_margin:
            return FlowResult.none("ambiguous", texture, dt)
        return self._result(peak.dx, peak.dy, True, "", peak.score, texture, peak.saturated, dt,
                            first.frame_size)

    def _refined(self, first: FlowFeatures, second: FlowFeatures, scores: np.ndarray, peak: Peak,
                 texture: float, dt: float) -> FlowResult:
        """The device's peaks refined at the frame's resolution (robotics.flow_refine); valid when the best
        refined displacement matches (``min_match``), no other one matches nearly as well (a repeating
        scene), and it lies inside the search range (else ``saturated``: the motion may be larger)."""
        sx, sy = self._px_per_step(first.frame_size)
        best = None  # the best-matching refined seed; a seed ending on an aperture counts only if all do
        refined, apertures = [], 0
        for gx, gy in seed_peaks(scores, peak):
            fit = flow_refine.refine(first.fine, second.fine, gx * sx, gy * sy)
            if fit is None:
                continue
            if fit.aperture:
                apertures += 1
                continue
            refined.append(fit)
            if best is None or fit.ncc > best.ncc:
                best = fit
        if best is None:  # stripes: no motion along them; else nothing overlapped
            return FlowResult.none("ambiguous" if apertures else "low_confidence", texture, dt)
        if best.ncc < self.min_match:
            return FlowResult.none("low_confidence", texture, dt)
        for other in refined:
            apart = max(abs(other.dx - best.dx) / sx, abs(other.dy - best.dy) / sy)
            if apart > 0.5 and other.ncc >= best.ncc - ALIAS_MATCH:
                return FlowResult.none("ambiguous", texture, dt)
        gx, gy = best.dx / sx, best.dy / sy
        if max(abs(gx), abs(gy)) > self.search_range - 0.5:  # past the grid's last half step: maybe larger
            return FlowResult(best.dx, best.dy, gx, gy, False, "saturated", best.ncc, texture, True, dt)
        return FlowResult(best.dx, best.dy, gx, gy, True, "", best.ncc, texture, False, dt)

    def _px_per_step(self, frame_size: tuple[int, int]) -> tuple[float, float]:
        return (self.grid_step * frame_size[0] / self.width, self.grid_step * frame_size[1] / self.height)

    def _result(self, gx: float, gy: float, valid: bool, reason: str, confidence: float, texture: float,
                saturated: bool, dt: float, frame_size: tuple[int, int]) -> FlowResult:
        sx, sy = self._px_per_step(frame_size)
        return FlowResult(gx * sx, gy * sy, gx, gy, valid, reason, confidence, texture, saturated, dt)

    def compute(self, frame_t: np.ndarray, frame_t1: np.ndarray) -> FlowResult:
        """Motion from ``frame_t`` to ``frame_t1`` (two backend calls; LibrEdgeTPU's ``compute``)."""
        return self.flow(self.features(frame_t), self.features(frame_t1))

    # -- a stream --------------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the previous frame: the next frame starts a new pair."""
        self._previous, self._previous_stamp = None, None

    def step(self, image: np.ndarray, stamp: float | None = None) -> FlowResult:
        """Motion since the previous frame of the stream (one backend call for this frame).

        ``stamp`` (seconds, the frame's own time) gives ``dt``; a stamp not after the previous one, or more
        than ``max_gap`` later (when ``max_gap > 0``), starts a new pair instead of reporting a jump.
        """
        current = self.features(image)
        previous, previous_stamp = self._previous, self._previous_stamp
        self._previous, self._previous_stamp = current, stamp
        if previous is None:
            return FlowResult.none("first_frame", current.texture)
        dt = 0.0
        if stamp is not None and previous_stamp is not None:
            dt = stamp - previous_stamp
            if dt <= 0.0:
                return FlowResult.none("stamp", current.texture, dt)
            if self.max_gap > 0.0 and dt > self.max_gap:
                return FlowResult.none("gap", current.texture, dt)
        return self.flow(previous, current, dt)

    def details(self) -> dict[str, Any]:
        return {"mode": self.mode, "refine": self.refine, "min_match": self.min_match,
                "fused_pool": self.fused_pool, "pool_factor": self.pool_factor,
                "grid_step_px": self.grid_step, "search_range": self.search_range,
                "temperature": self.temperature, "min_texture": self.min_texture,
                "min_confidence": self.min_confidence, "min_margin": self.min_margin, "kernels": self.kernels}


def seed_peaks(scores: np.ndarray, peak: Peak) -> list[tuple[float, float]]:
    """Where the refinement starts, in grid steps: the device's best peak (sub-grid) and up to
    ``MAX_SEEDS - 1`` other local maxima of the score grid within ``SEED_DROP`` of it (the candidates a
    repeating scene or a fine texture confuses)."""
    r = scores.shape[0] // 2
    seeds = [(peak.dx, peak.dy)]
    if peak.margin > SEED_DROP + 1e-6:  # every score outside the peak's 3x3 is too low to seed (the float32
        return seeds  # comparison below cannot differ by more than the 1e-6 kept)
    best_j, best_i = round(peak.dy) + r, round(peak.dx) + r
    grid = scores.astype(np.float32)
    neighbourhood = cv2.dilate(grid, np.ones((3, 3), np.uint8), borderType=cv2.BORDER_CONSTANT,
                               borderValue=-np.inf)  # the 3x3 maximum around each cell
    local = (grid >= neighbourhood) & (grid >= peak.score - SEED_DROP)
    for j, i in sorted(zip(*np.nonzero(local), strict=True), key=lambda ji: -scores[ji]):
        if len(seeds) == MAX_SEEDS:
            break
        if max(abs(j - best_j), abs(i - best_i)) > 1:
            seeds.append((float(i - r), float(j - r)))
    return seeds
