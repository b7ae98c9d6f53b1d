"""PatternTracker: where a reference patch lies in the search image (Conv2D correlation + soft argmax).

The template is ``QUANTIZE -> CONV_2D (the patch as a kh x kw x C filter, VALID, ReLU) -> SOFTMAX -> soft
argmax`` over the (H - kh + 1) x (W - kw + 1) correlation grid; the output decodes like the spot tracker's
(robotics/offsets.py) to the grid position of the patch's top-left corner.

``set_template(patch)`` turns a patch (uint8 / [0, 255]) into filter values: zero mean (so a bright flat
region does not outscore the match) and a gain chosen from the model's own quantization, so that the patch's
response to itself fills ~90 % of the correlation output's range (the filter scale, the conv output scale
and the input scale are fixed in the compiled instructions; only the int8 values change).
``set_template_raw(int8)`` writes given values. Each value lands at the sidecar's ``conv_weight_offsets`` in
the blob the sidecar names (``conv_weight_blob``: PARAMETER_CACHING or EXECUTION_ONLY) and in the twin's
filter tensor, as one version.

LibrEdgeTPU quantizes the raw 0..255 patch with the filter scale (~1/127), which saturates every pixel above
0.33 to 127 and turns the filter into a box; we do not copy that. No compiled PatternTracker file exists in
the fixtures: the CPU twin runs it, and its Edge TPU path is tested with doubles only (docs/robotics.md)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from libredgetpu_ros.backends.base import tensor_spec
from libredgetpu_ros.errors import ConfigError, ImageError, ModelFormatError, WeightsError
from libredgetpu_ros.reparam import device_to_int8, make_patch
from libredgetpu_ros.robotics import ncc
from libredgetpu_ros.robotics.base import RoboticsModule
from libredgetpu_ros.robotics.image import as_uint8
from libredgetpu_ros.robotics.offsets import OffsetDecoder, TrackResult
from libredgetpu_ros.robotics.pattern_validity import PatternEvidence, PatternLimits, PatternValidity
from libredgetpu_ros.robotics.template import RoboticsTemplate, TemplateRunner, load_template

BLOB_NAMES = {"pc_params": "pc", "eo_params": "eo"}
MAX_OFFSET = 1 << 31  # no parameter blob comes near 2 GiB (the DarwiNN reader caps them well below)
SELF_RESPONSE_FILL = 0.9  # fraction of the correlation output range the patch's match should reach
MODES = ("normalized", "libredgetpu")
PASSES = 2  # device runs per frame in the normalized mode (the second with the first answer blanked)
REFINE_RADIUS = 3  # template-input pixels around a device answer searched by exact NCC


class TemplateSwap(NamedTuple):
    version: int
    weights: np.ndarray  # int8 values now in the model, as given ((kh, kw) or (kh, kw, C))
    gain: float  # filter value per (pixel - patch mean); 0 for raw swaps
    total_us: float


@dataclass(frozen=True, slots=True)
class PatternMatch:
    """A track result with the patch's place in template-input pixels."""

    result: TrackResult
    x: float  # patch centre, template-input pixels
    y: float
    evidence: PatternEvidence | None = None  # the CPU check (normalized mode; robotics/pattern_validity.py)

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.result.to_dict(), x=self.x, y=self.y)
        if self.evidence is not None:  # the check's figures: why the answer is (not) valid
            out.update({k: v for k, v in self.evidence.to_dict().items() if k not in ("valid", "reason")})
        return out


class PatternTracker(RoboticsModule):
    """Template matching on a pattern template (CPU twin; Edge TPU when a compiled file exists)."""

    MODULE = "pattern"

    def __init__(self, template: RoboticsTemplate, backend: str = "auto", device: Any = None,
                 resize: bool = True, backend_object: Any = None,
                 blobs: dict[str, np.ndarray] | None = None, mode: str = "normalized",
                 min_score: float | None = None, passes: int = PASSES,
                 limits: PatternLimits | None = None, rate_hz: float = 0.0,
                 cpu_threads: int | None = 1, stream: str = "") -> None:
        """``limits``: the validity check's (robotics/pattern_validity.py); ``min_score``, when given,
        replaces theirs."""
        if mode not in MODES:
            raise ConfigError(f"pattern mode must be one of {', '.join(MODES)}, got {mode!r}")
        limits = limits or PatternLimits()
        if min_score is not None:
            if not -1.0 <= min_score <= 1.0:
                raise ConfigError(f"pattern min_score must be in [-1, 1], got {min_score}")
            limits = replace(limits, min_score=float(min_score))
        if not 1 <= passes <= 4:
            raise ConfigError(f"pattern passes must be in 1..4, got {passes}")
        self.mode, self.passes = mode, int(passes)
        self.validity = PatternValidity(limits)
        self.min_score = limits.min_score
        self.template = template
        self.height, self.width, self.channels = template.image_shape
        self.resize = resize
        self._filter = template.conv_weights(0)
        shape = tuple(int(d) for d in self._filter.shape)
        if len(shape) != 4 or shape[0] != 1 or shape[3] != self.channels:
            raise ModelFormatError(f"{template.twin_path}: filter {self._filter.name!r} has shape {shape}; "
                                   f"expected (1, kh, kw, {self.channels})")
        self.kernel_height, self.kernel_width = shape[1], shape[2]
        self._filter_shape, self._filter_index = shape, self._filter.index
        self._patch_shape = shape[1:]  # (kh, kw, C)
        spec = tensor_spec(self._filter)
        self.filter_scale = template.weight_scale(self._filter)
        for key, value in (("kernel_height", shape[1]), ("kernel_width", shape[2]),
                           ("conv_weight_scale", self.filter_scale),
                           ("conv_weight_zero_point", spec.zero_point),
                           ("conv_weight_count", int(np.prod(shape)))):
            template.check_sidecar(key, value)
        self.grid_height = self.height - self.kernel_height + 1
        self.grid_width = self.width - self.kernel_width + 1
        self.decoder = OffsetDecoder(template.output, template.field("temperature"),
                                     template.field("y_offset"))
        self._budget = self._response_budget()
        self.runner = TemplateRunner(template, backend, device, twin_tensors=(self._filter_index,),
                                     backend_object=backend_object, blobs=blobs, rate_hz=rate_hz,
                                     stream=stream, cpu_threads=cpu_threads)
        try:  # a sidecar that does not match the compiled blob: the backend (a device stream) closed again
            self.offsets, self.blob_kind = self._offsets(self.runner.parameters.blobs)
        except BaseException:
            self.runner.close()
            raise

    @classmethod
    def from_template(cls, search: int = 64, kernel: int = 8, channels: int = 1, folder: Path | None = None,
                      **kwargs: Any) -> PatternTracker:
        name = f"pattern_{search}x{search}_{kernel}x{kernel}_{channels}ch"
        return cls(load_template(name, folder), **kwargs)

    def _response_budget(self) -> float:
        """Largest filter-value x pixel sum the correlation output holds (from the model's scales)."""
        conv = next(op for op in self.template.twin.operators if op.opcode_name == "CONV_2D")
        out = tensor_spec(self.template.twin.tensors[conv.outputs[0]])
        conv_in = tensor_spec(self.template.twin.tensors[conv.inputs[0]])
        top = (np.iinfo(out.dtype).max - out.zero_point) * out.scale  # ReLU: the output starts at 0
        return float(top / (conv_in.scale * self.filter_scale))

    def _offsets(self, blobs: Any) -> tuple[np.ndarray, str]:
        where = self.template.sidecar_path
        raw = self.template.field("conv_weight_offsets", list)
        count = self.kernel_height * self.kernel_width * self.channels
        # Bounded before NumPy sees them: past intp's range np.array raises OverflowError.
        ints = all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_OFFSET for v in raw)
        if len(raw) != count or not ints:
            raise ModelFormatError(f"{where}: field 'conv_weight_offsets' must hold {count} non-negative "
                                   f"integers below {MAX_OFFSET} (one per filter value)")
        offsets = np.array(raw, dtype=np.intp)
        offsets.setflags(write=False)  # one checked array: later patches skip re-checking it
        if np.unique(offsets).size != offsets.size:
            raise ModelFormatError(f"{where}: field 'conv_weight_offsets' repeats offsets")
        name = self.template.sidecar.get("conv_weight_blob", "pc_params")
        if name not in BLOB_NAMES:
            raise ModelFormatError(f"{where}: field 'conv_weight_blob' is {name!r}, expected one of "
                                   f"{sorted(BLOB_NAMES)}")
        kind = BLOB_NAMES[name]
        blob = blobs.get(kind)
        if blob is not None:  # the compiled model's own filter must be where the sidecar says
            if int(offsets.max()) >= blob.size:
                raise ModelFormatError(f"{where}: conv_weight_offsets reach {int(offsets.max())}, the "
                                       f"{kind!r} blob has {blob.size} bytes")
            twin_values = self.template.twin.buffer_data(self._filter).reshape(-1)
            if not np.array_equal(device_to_int8(np.asarray(blob)[offsets]), twin_values):
                raise ModelFormatError(f"{where}: the {kind!r} blob does not hold the twin's filter at "
                                       f"conv_weight_offsets")
        return offsets, kind

    # -- template -------------------------------------------------------------------------------------------
    def patch_shape(self) -> tuple[int, int, int]:
        return self._patch_shape

    def quantize_patch(self, patch: object) -> tuple[np.ndarray, float]:
        """(int8 filter values (kh, kw, C), gain) of a patch; see the module docstring."""
        array = self.match_channels(patch, "template patch")  # RGB -> grey for a one-channel template
        if array.shape != self.patch_shape():
            raise WeightsError(f"template patch has shape {array.shape}; this template takes "
                               f"{self.patch_shape()} (kh, kw, channels)")
        centred = array.astype(np.float64) - array.mean()
        peak = float(np.abs(centred).max())
        energy = float((centred * centred).sum())
        if peak == 0.0:
            raise WeightsError("template patch is flat (no contrast): nothing to correlate")
        gain = min(127.0 / peak, SELF_RESPONSE_FILL * self._budget / energy)
        return np.clip(np.rint(centred * gain), -128, 127).astype(np.int8), gain

    def set_template(self, patch: object) -> TemplateSwap:
        """Track ``patch`` from the next frame on (no compiler; old template kept on any error). In the
        normalized mode the patch is normalised like the search image (robotics/ncc.py) first."""
        t0 = time.perf_counter()
        array = self.match_channels(patch, "template patch")
        if self.mode == "normalized":
            array = self._checked_patch(array)
            array = ncc.normalize_search(array, self.kernel_height, self.kernel_width)
        values, gain = self.quantize_patch(array)
        return self._publish(values, gain, t0)

    def set_template_at(self, image: object, x: int, y: int) -> TemplateSwap:
        """Track the patch whose top-left corner is (x, y) (template-input pixels) of ``image``; in the
        normalized mode it is cut from the normalised image, as the search will see it."""
        t0 = time.perf_counter()
        patch = self.cut_patch(image, x, y)
        if self.mode == "normalized":
            normal = ncc.normalize_search(self.fit(image), self.kernel_height, self.kernel_width)
            self._checked_patch(patch)  # a flat region is refused on its own pixels
            patch = normal[y:y + self.kernel_height, x:x + self.kernel_width]
        values, gain = self.quantize_patch(patch)
        return self._publish(values, gain, t0)

    def _checked_patch(self, array: np.ndarray) -> np.ndarray:
        array = as_uint8(array, "template patch")
        shaped = array[:, :, None] if array.ndim == 2 else array
        if shaped.shape != self.patch_shape():
            raise WeightsError(f"template patch has shape {shaped.shape}; this template takes "
                               f"{self.patch_shape()} (kh, kw, channels)")
        if int(shaped.max()) == int(shaped.min()):
            raise WeightsError("template patch is flat (no contrast): nothing to correlate")
        return shaped

    def set_template_raw(self, values: object) -> TemplateSwap:
        """Write int8 filter values (kh, kw, C) as they are."""
        t0 = time.perf_counter()
        array = values if type(values) is np.ndarray else np.asarray(values)
        shape = array.shape
        if array.dtype != np.int8 or (shape != self._patch_shape and shape != self._patch_shape[:2]
                                      if self.channels == 1 else shape != self._patch_shape):
            raise WeightsError(f"raw template is {array.dtype} {array.shape}; expected int8 "
                               f"{self.patch_shape()}")
        return self._publish(array.copy(), 0.0, t0)  # a copy: the caller may reuse its array

    def _publish(self, values: np.ndarray, gain: float, t0: float) -> TemplateSwap:
        # read-only before the view: the published twin is a view of it (the store copies views of
        # writable memory), and the swap record handed back must not be able to change it either
        values.setflags(write=False)
        twin = values.reshape(self._filter_shape)  # the twin filter's (1, kh, kw, C)
        store = self.runner.store
        base = store.current.blobs.get(self.blob_kind)
        blobs = None if base is None else {self.blob_kind: make_patch(base, self.offsets, twin)}
        published = store.publish(blobs=blobs, twin={self._filter_index: twin})
        return TemplateSwap(published.version, values, gain, (time.perf_counter() - t0) * 1e6)

    def weights(self) -> np.ndarray:
        """The active int8 filter (kh, kw, C), from the current parameter set."""
        return self.runner.parameters.twin[self._filter_index].reshape(self._patch_shape)

    def cut_patch(self, image: object, x: int, y: int) -> np.ndarray:
        """The patch whose top-left corner is (x, y) in template-input pixels of ``image`` (resized first)."""
        fitted = self.fit(image)
        if not (0 <= x <= self.width - self.kernel_width and 0 <= y <= self.height - self.kernel_height):
            raise ImageError(f"a {self.kernel_width}x{self.kernel_height} patch at ({x}, {y}) leaves the "
                             f"{self.width}x{self.height} image")
        return fitted[y:y + self.kernel_height, x:x + self.kernel_width].copy()

    # -- tracking -------------------------------------------------------------------------------------------
    def track(self, image: object) -> PatternMatch:
        """Where the patch is. ``libredgetpu`` mode: the template's soft argmax on the frame as it is.
        ``normalized``: the frame locally normalised, up to ``passes`` device runs (each after blanking the
        previous answer's neighbourhood), each answer refined by exact NCC on the CPU; the best-scoring one
        is the match, valid when the frame's whole NCC map agrees that it is the patch's one clear place
        (robotics/pattern_validity.py: ``low_score``, ``device_miss``, ``ambiguous``)."""
        fitted = self.fit(image)
        if self.mode == "libredgetpu":
            outputs, parameters = self.runner.run([fitted[None]])
            result = self.decoder.decode(outputs[self.template.output.name], parameters.version)
            col, row = self.decoder.grid_position(result, self.grid_width, self.grid_height)
            return PatternMatch(result, col + (self.kernel_width - 1) / 2, row + (self.kernel_height - 1) / 2)
        kh, kw = self.kernel_height, self.kernel_width
        normal = ncc.normalize_search(fitted, kh, kw)
        parameters = self.runner.parameters  # every pass and the refinement on one version
        weights = parameters.twin[self._filter_index].reshape(self._patch_shape).astype(np.float32)
        device, best = None, None
        search = normal
        for attempt in range(self.passes):
            outputs, _ = self.runner.run([search[None]], parameters)
            decoded = self.decoder.decode(outputs[self.template.output.name], parameters.version)
            device = device or decoded
            col, row = self.decoder.grid_position(decoded, self.grid_width, self.grid_height)
            found = ncc.refine(normal, weights, col, row, REFINE_RADIUS)
            if best is None or found[2] > best[2]:
                best = found
            if attempt + 1 < self.passes:  # blank the answer (mid-grey is zero after normalisation)
                search = search.copy()
                x0, y0 = max(0, round(col) - kw // 2), max(0, round(row) - kh // 2)
                search[y0:round(row) + kh + kh // 2, x0:round(col) + kw + kw // 2] = 128
        x, y, score = best
        offset = (x / ((self.grid_width - 1) / 2) - 1.0, y / ((self.grid_height - 1) / 2) - 1.0)
        result = device._replace(x_offset=offset[0], y_offset=offset[1], reason="ok", score=score)
        evidence = self.validity.check(normal, weights, x, y)
        if not evidence.valid:
            result = result.invalidated(evidence.reason, score=score)
        return PatternMatch(result, x + (kw - 1) / 2, y + (kh - 1) / 2, evidence)

    def details(self) -> dict[str, Any]:
        return {"kernel": [self.kernel_width, self.kernel_height], "blob": self.blob_kind, "mode": self.mode,
                "min_score": self.min_score, "passes": self.passes, "validity": asdict(self.validity.limits)}
