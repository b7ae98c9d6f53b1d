"""Frame in, results out: pre-process -> backend (one or more compiled segments) -> post-process.

The same pipeline runs on the Edge TPU and on the CPU; only the backend differs. Results are in pixels of
the frame that was passed in.

``process`` is two stages run back to back: ``prepare`` (the frame -> the model's input; pure CPU, any thread)
and ``run`` (backend + post-processing, the pipeline's one worker thread), so a caller with frames queued
ahead (process-bag's reader thread) can prepare the next frames while the current one runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.backends import Backend, BoundaryInfo, open_backend
from libredgetpu_ros.errors import ConfigError, InputError, ModelFormatError, clip
from libredgetpu_ros.paths import check_regular, file_kind
from libredgetpu_ros.perception.images import check_rgb
from libredgetpu_ros.perception.preprocess import InputTransform
from libredgetpu_ros.perception.results import PerceptionResult
from libredgetpu_ros.perception.tasks import HeadOptions, check_task, detect_task, make_head
from libredgetpu_ros.threads import limit_library_threads

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class PipelineConfig:
    """What to run. ``model`` is one compiled file, or the segments of a pipelined model in order (a list
    or a comma-separated string). ``cpu_model`` is the CPU twin of a single-file model (default: the
    compiled name without ``_edgetpu``). ``None`` options keep the model's defaults; ``cpu_threads`` is
    LiteRT's thread count on the cpu backend (None: LiteRT's default); ``library_threads`` the BLAS / OpenMP /
    OpenCV pools the CPU tails run on (``threads.limit_library_threads``: None its default, 0 the libraries'
    own), set process-wide when the pipeline opens. ``device`` selects the accelerator
    (``edgetpu.device.parse_selector``), ``device_share_hz`` is this pipeline's weight on it when it is shared
    (``edgetpu/broker.py``: its expected frame rate; 0: unset, ``broker.Stream.weight``) and ``stream`` its
    first segment's stream name there (its user's, e.g. a node's; later segments add "(segment k)"; "": the
    model files)."""

    model: str | Path | Sequence[str | Path]
    cpu_model: str | Path | None = None
    backend: str = "auto"
    device: str | None = None
    task: str = "auto"
    labels: str | Path | None = None
    score_threshold: float | None = None
    max_results: int | None = None
    top_k: int = 5
    cpu_threads: int | None = None
    library_threads: int | None = None
    device_share_hz: float = 0.0
    stream: str = ""

    def model_paths(self) -> list[Path]:
        if isinstance(self.model, str | Path):
            parts = [p.strip() for p in str(self.model).split(",")]
        else:
            parts = [str(p).strip() for p in self.model]
        from libredgetpu_ros.models.store import resolve_model

        # A catalogue name (`model: mobilenet_v1_0.25_128`) means its cached file (libredgetpu-ros models).
        paths = [Path(resolve_model(p)) for p in parts if p]
        if not paths:
            raise ConfigError("model is empty: give a compiled .tflite file")
        for path in paths:
            if file_kind(path) == "missing":
                raise InputError(f"model {clip(str(path))} does not exist: {_missing_model_hint(path)}")
            check_regular(path, "model")  # a FIFO, device or folder: named by its kind
        return paths


def _missing_model_hint(path: Path) -> str:
    """What to do about a model file that is not there: the fetch command when its file name is a
    catalogue model's, else where the catalogue is listed (nothing is downloaded here)."""
    from libredgetpu_ros.models.catalogue import CATALOGUE

    for entry in CATALOGUE.values():
        if entry.edgetpu is not None and entry.edgetpu.name == path.name:
            return (f"it is catalogue model {entry.name}: run `libredgetpu-ros models fetch {entry.name}` "
                    f"(or `models import DIR` offline) and set model: {entry.name}")
    return ("give the path of a compiled *_edgetpu.tflite, or a catalogue name (`libredgetpu-ros models "
            "list`; then `libredgetpu-ros models fetch NAME`)")


@dataclass(frozen=True, slots=True)
class PreparedInput:
    """A frame turned into the model's input by ``PerceptionPipeline.prepare``: the input tensor, the
    frame's (width, height) the results are scaled to, and the time it took (the ``preprocess`` stage)."""

    tensor: np.ndarray
    image_size: tuple[int, int]
    preprocess_ms: float


@dataclass(frozen=True, slots=True)
class _Segment:
    path: Path
    model: Any  # formats.TfliteModel of the compiled file
    boundary: BoundaryInfo
    backend: Backend


class PerceptionPipeline:
    """See the module docstring. Build with :meth:`from_config`; ``process`` is meant for one worker thread,
    ``set_options`` may be called from any thread."""

    def __init__(self, segments: list[_Segment], task: str, labels: dict[int, str] | None,
                 transform: InputTransform, options: HeadOptions) -> None:
        self._segments = segments
        self.task = task
        self.labels = labels
        self._transform = transform
        self._options = options
        self._head = make_head(task, segments[-1].model, labels, options)
        self._pending: tuple[HeadOptions, Any] | None = None  # (options, head) for the next frame
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: PipelineConfig, logger: logging.Logger | None = None) -> PerceptionPipeline:
        from libredgetpu_ros.formats import load_model
        from libredgetpu_ros.postprocess.labels import read_labels

        log = logger or _log
        paths = cfg.model_paths()
        options = HeadOptions(cfg.score_threshold, cfg.max_results, cfg.top_k).validate()
        from libredgetpu_ros.models.store import resolve_labels

        labels = read_labels(resolve_labels(str(cfg.labels))) if cfg.labels else None
        models = [load_model(p) for p in paths]
        boundaries = [BoundaryInfo.from_model(m, p) for m, p in zip(models, paths, strict=True)]

        last = boundaries[-1]
        detected = detect_task(models[-1], [o.shape for o in last.outputs])
        task = check_task(cfg.task, detected, str(paths[-1]))
        first = boundaries[0]
        if len(first.inputs) != 1:
            raise ModelFormatError(f"{paths[0]}: the Edge TPU op reads {len(first.inputs)} tensors; an image "
                                   f"model reads one")
        transform = InputTransform.for_input(first.inputs[0], "nearest" if task == "pose" else "area")
        _check_chain(paths, boundaries)

        if len(paths) > 1:
            if cfg.cpu_model is not None:
                raise ConfigError("cpu_model applies to a single-file model, not to a segmented one")
            names = ", ".join(p.name for p in paths)
            no_twin = f"{len(paths)}-segment Edge TPU pipelines ({names}) have no CPU twin"
            if cfg.backend == "cpu":
                raise ConfigError(f"{no_twin}; the cpu backend cannot run them (use backend edgetpu or auto)")
        else:
            no_twin = ""
        pools = limit_library_threads(cfg.library_threads)
        log.debug("pipeline: library thread pools %s", pools or "left at the libraries' defaults")
        segments: list[_Segment] = []
        try:
            for k, (path, model, boundary) in enumerate(zip(paths, models, boundaries, strict=True)):
                if segments and segments[0].backend.name == "edgetpu":
                    # later segments share the first one's accelerator (one owner per device)
                    backend = open_backend("edgetpu", path, device=segments[0].backend.device, logger=log,
                                           rate_hz=cfg.device_share_hz,
                                           stream=f"{cfg.stream} (segment {k + 1})" if cfg.stream else "")
                else:
                    backend = open_backend(cfg.backend, path, cfg.cpu_model, device=cfg.device, logger=log,
                                           cpu_threads=cfg.cpu_threads, rate_hz=cfg.device_share_hz,
                                           no_cpu=no_twin, stream=cfg.stream)
                segments.append(_Segment(path, model, boundary, backend))
            pipeline = cls(segments, task, labels, transform, options)
        except BaseException:
            for seg in segments:
                seg.backend.close()
            raise
        log.info("pipeline: %s on %s, input %dx%d", task, segments[0].backend.name, *transform.size)
        return pipeline

    @property
    def input_size(self) -> tuple[int, int]:
        """(width, height) of the model input."""
        return self._transform.size

    @property
    def backend_name(self) -> str:
        return self._segments[0].backend.name

    def set_options(self, score_threshold: float | None = None, max_results: int | None = None,
                    top_k: int | None = None) -> None:
        """Change thresholds from the next frame on; invalid values raise ConfigError and change nothing.

        The new post-processing head is built here, in the caller's thread, so ``process`` only swaps it in.
        """
        with self._lock:
            base = self._pending[0] if self._pending else self._options
        changed = HeadOptions(score_threshold if score_threshold is not None else base.score_threshold,
                              max_results if max_results is not None else base.max_results,
                              top_k if top_k is not None else base.top_k).validate()
        head = make_head(self.task, self._segments[-1].model, self.labels, changed)
        with self._lock:
            self._pending = (changed, head)

    def prepare(self, rgb: np.ndarray) -> PreparedInput:
        """The first stage of :meth:`process`: the frame checked and turned into the model's input (resize,
        quantization). Pure CPU on this frame only (no backend, no option touched): safe on any thread,
        concurrently with :meth:`run` (process-bag runs it on its reader thread). ``ImageError`` for a frame
        that is not HxWx3 uint8 RGB."""
        t0 = time.perf_counter()
        check_rgb(rgb)
        image_size = (int(rgb.shape[1]), int(rgb.shape[0]))
        tensor = self._transform(rgb)
        return PreparedInput(tensor, image_size, (time.perf_counter() - t0) * 1e3)

    def run(self, prepared: PreparedInput) -> PerceptionResult:
        """The second stage of :meth:`process`: inference on a :meth:`prepare` d input, then post-processing
        (results in pixels of the frame it was prepared from)."""
        t1 = time.perf_counter()
        self._apply_pending()
        outputs = self._segments[0].backend.run([prepared.tensor])
        for seg in self._segments[1:]:  # later segments read earlier outputs by tensor name
            outputs = {**outputs, **seg.backend.run([outputs[name] for name in seg.boundary.input_names])}
        t2 = time.perf_counter()
        found = self._head(outputs, self._transform.size, prepared.image_size)
        t3 = time.perf_counter()
        timings = {"preprocess": prepared.preprocess_ms, "inference": (t2 - t1) * 1e3,
                   "postprocess": (t3 - t2) * 1e3, "total": prepared.preprocess_ms + (t3 - t1) * 1e3}
        return PerceptionResult(task=self.task, image_size=prepared.image_size, backend=self.backend_name,
                                poses=found.poses, detections=found.detections, classes=found.classes,
                                mask=found.mask, timings=timings)

    def process(self, rgb: np.ndarray) -> PerceptionResult:
        """One frame: :meth:`prepare` then :meth:`run`, back to back."""
        return self.run(self.prepare(rgb))

    def _apply_pending(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self._options, self._head = pending

    def describe(self) -> dict[str, Any]:
        return {"task": self.task, "input_size": list(self.input_size),
                "models": [str(s.path) for s in self._segments],
                "backend": self.backend_name,
                "segments": [s.backend.describe() for s in self._segments],
                "labels": len(self.labels) if self.labels else 0}

    def shared_status(self) -> dict[str, Any]:
        """The first segment's stream on a shared accelerator (``EdgeTpuBackend.shared_status``: served,
        superseded, p50/p99 ms, faults; the device's users, faults, reopens); empty on the CPU."""
        status = getattr(self._segments[0].backend, "shared_status", None)
        return status() if status is not None else {}

    def close(self) -> None:
        for seg in self._segments:
            seg.backend.close()

    def __enter__(self) -> PerceptionPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_chain(paths: list[Path], boundaries: list[BoundaryInfo]) -> None:
    """Each later segment must read only tensors that earlier segments produce (matched by name)."""
    produced: set[str] = set(boundaries[0].output_names)
    for path, boundary in zip(paths[1:], boundaries[1:], strict=True):
        missing = [n for n in boundary.input_names if n not in produced]
        if missing:
            raise ModelFormatError(f"{path}: reads {missing}, which no earlier segment produces")
        produced.update(boundary.output_names)
