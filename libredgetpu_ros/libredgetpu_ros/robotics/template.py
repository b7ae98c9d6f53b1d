"""The shared base of the robotics modules: a template (compiled model + CPU twin + sidecar) and its runner.

A template ``NAME`` is up to three files in one folder: ``NAME_edgetpu.tflite`` (compiled by
``edgetpu_compiler``; missing for the pattern trackers, see docs/robotics.md), ``NAME.tflite`` (the int8 model
it was compiled from, the "twin") and ``NAME_edgetpu.json`` (LibrEdgeTPU's sidecar: sizes, temperature, blob
offsets). Every scale and zero point is read from the MODEL; the sidecar's copies are checked against it and
a disagreement is a ``ModelFormatError`` naming the field (fields the sidecars are known to get wrong, such as
the spot tracker's ``color_weight_scale``, are left to the module, which reads the model instead).

API (for every module in this folder):

- :func:`load_template(path_or_name, folder=None)` -> :class:`RoboticsTemplate`: ``input`` / ``outputs``
  (``TensorSpec``), ``sidecar`` (dict), ``blobs()`` (the compiled parameter blobs by kind ``"pc"`` /
  ``"eo"`` / ``"sa"``), ``conv_weights(n)`` (the twin tensor of the n-th CONV_2D's filter),
  ``field(key)`` (a sidecar-only value, checked), ``check_sidecar(key, model_value)``.
- :class:`TemplateRunner(template, backend="auto", device=None, rate_hz=0.0)`: one loaded backend (Edge TPU
  or CPU twin; ``rate_hz`` its weight on an accelerator shared in the process, ``edgetpu/broker.py``)
  and a :class:`~libredgetpu_ros.reparam.ParameterStore` holding the parameters; ``run(inputs)`` ->
  ``(outputs by tensor name, ParameterSet)`` from one snapshot; ``publish(blobs=..., twin=...)`` swaps in
  new parameters atomically (uploaded / rebuilt before they become current). Modules that never swap
  (optical flow) simply never publish.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.backends.base import BoundaryInfo, TensorSpec, tensor_spec
from libredgetpu_ros.errors import BackendError, ConfigError, InputError, ModelFormatError, TextDataError
from libredgetpu_ros.models.templates import MAX_TEMPLATE_BYTES
from libredgetpu_ros.paths import check_regular, file_kind
from libredgetpu_ros.reparam import ParameterSet, ParameterStore
from libredgetpu_ros.robotics import image_kernels, resize_kernels
from libredgetpu_ros.robotics.template_set import current_set
from libredgetpu_ros.textdata import clip, clip_repr, load_json_file

COMPILED_SUFFIX = "_edgetpu.tflite"
SIDECAR_SUFFIX = "_edgetpu.json"
# Sidecar floats are float32 values printed as doubles.
SIDECAR_RTOL = 1e-6
MAX_SIDECAR_BYTES = 1 << 20
# TextDataError kinds that blame the sidecar's content (the others: the file could not be read)
_SIDECAR_CONTENT_ERRORS = frozenset({"limit", "UnicodeDecodeError", "JSONDecodeError", "ValueError",
                                     "RecursionError"})


def _base_of(path: Path) -> Path:
    name = path.name
    for suffix in (COMPILED_SUFFIX, SIDECAR_SUFFIX, ".tflite"):
        if name.endswith(suffix):
            return path.with_name(name[: -len(suffix)])
    return path


def template_files(template: str | Path, folder: Path | None = None) -> tuple[Path | None, Path, Path]:
    """(compiled or None, twin, sidecar) of a template given by any of its files or its base name.

    A bare name (``color_red_64x64``) is looked up in ``folder`` and its sub-folders when given, else in the
    model cache, ``$LIBREDGETPU_ROS_TEMPLATES`` and the fixtures (models/templates.py: one ConfigError with
    the fetch command when it is nowhere)."""
    path = Path(template)
    base = _base_of(path)
    if not base.parent.joinpath(base.name + ".tflite").is_file() and path.parent == Path("."):
        if folder is None:
            from libredgetpu_ros.models.templates import resolve_template

            base = resolve_template(base.name)
        else:
            from libredgetpu_ros.models.templates import find_in_folder

            base = find_in_folder(base.name, Path(folder)) or base
    base = current_set(base)  # the staged set while `retarget -o` replaces this one (template_set.py)
    compiled = base.with_name(base.name + COMPILED_SUFFIX)
    twin = base.with_name(base.name + ".tflite")
    sidecar = base.with_name(base.name + SIDECAR_SUFFIX)
    compiled_kind = file_kind(compiled)
    if path.name.endswith(COMPILED_SUFFIX) and compiled_kind == "missing":
        # a compiled file named but absent is an error, never a silent run of the twin beside it
        raise InputError(f"compiled template {clip(str(compiled))} does not exist (name the twin NAME.tflite "
                         f"to run it on the CPU)")
    if compiled_kind != "missing":  # there but a FIFO, device or folder: named by its kind, never skipped
        check_regular(compiled, "compiled template")
    missing = [str(p) for p in (twin, sidecar) if file_kind(p) == "missing"]
    if missing:
        raise ModelFormatError(f"template {str(template)!r} is incomplete: missing {', '.join(missing)} "
                               f"(a template is NAME.tflite + NAME_edgetpu.json, plus NAME_edgetpu.tflite "
                               f"to run on the Edge TPU)")
    check_regular(twin, "template twin", error=ModelFormatError)
    check_regular(sidecar, "template sidecar", error=ModelFormatError)
    return (None if compiled_kind == "missing" else compiled), twin, sidecar


def _read_sidecar(path: Path) -> dict[str, Any]:
    try:  # size (before reading), UTF-8 and nesting depth bounded (textdata.py)
        data = load_json_file(path, "sidecar", max_bytes=MAX_SIDECAR_BYTES, max_depth=32)
    except TextDataError as exc:
        if exc.kind not in _SIDECAR_CONTENT_ERRORS:  # the file could not be read at all
            raise InputError(f"cannot read sidecar {path}: {exc}") from None
        raise ModelFormatError(f"{path}: sidecar is not JSON within its budgets: {exc}") from None
    if not isinstance(data, dict):
        raise ModelFormatError(f"{path}: sidecar must be a JSON object, got {type(data).__name__}")
    return data


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)):
        return a == b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return math.isclose(float(a), float(b), rel_tol=SIDECAR_RTOL, abs_tol=1e-12)


@dataclass(frozen=True, eq=False)
class RoboticsTemplate:
    """A loaded template whose sidecar agrees with its model (see the module docstring)."""

    name: str
    compiled_path: Path | None
    twin_path: Path
    sidecar_path: Path
    sidecar: dict[str, Any]
    twin: Any  # formats.TfliteModel of the uncompiled model
    compiled: Any  # formats.TfliteModel of the compiled model, or None
    boundary: BoundaryInfo  # the Edge TPU op's tensors; the twin's graph when no compiled model exists

    @property
    def input(self) -> TensorSpec:
        return self.boundary.inputs[0]

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.boundary.outputs

    @property
    def output(self) -> TensorSpec:
        return self.boundary.outputs[0]

    @cached_property
    def image_shape(self) -> tuple[int, int, int]:
        """(height, width, channels) of the input image (computed once: every frame's fit reads it)."""
        shape = self.input.shape
        return int(shape[1]), int(shape[2]), int(shape[3])

    def package(self) -> Any:
        """The compiled model's DarwiNN package (ModelFormatError when there is no compiled model)."""
        if self.compiled is None:
            raise ModelFormatError(f"template {self.name}: no compiled model ({self.name}{COMPILED_SUFFIX}) "
                                   f"next to {self.twin_path}; it runs on the CPU twin only")
        return self.compiled.darwinn(self.compiled.edgetpu_ops()[0])

    def blobs(self) -> dict[str, np.ndarray]:
        """The compiled parameter blobs by kind (``pc``, ``eo``, ``sa``) as read-only uint8 views; {} without
        a compiled model."""
        if self.compiled is None:
            return {}
        from libredgetpu_ros.reparam import BLOB_KIND_OF

        return {BLOB_KIND_OF[exe.type]: np.frombuffer(exe.parameters, dtype=np.uint8)
                for exe in self.package().executables}

    def conv_weights(self, n: int = 0) -> Any:
        """The twin tensor holding the filter of the ``n``-th CONV_2D (formats ``Tensor``)."""
        convs = [op for op in self.twin.operators if op.opcode_name == "CONV_2D"]
        if n >= len(convs):
            raise ModelFormatError(f"{self.twin_path}: has {len(convs)} CONV_2D op(s), no #{n}")
        tensor = self.twin.tensors[convs[n].inputs[1]]
        if tensor.dtype != np.int8 or self.twin.buffer_data(tensor) is None:
            raise ModelFormatError(f"{self.twin_path}: CONV_2D #{n}'s filter {tensor.name!r} is not a "
                                   f"constant int8 tensor")
        return tensor

    def weight_scale(self, tensor: Any) -> float:
        """The (single) scale of a twin tensor, from the model."""
        spec = tensor_spec(tensor)
        if spec.scale <= 0 or not math.isfinite(spec.scale):
            raise ModelFormatError(f"{self.twin_path}: tensor {tensor.name!r} has scale {spec.scale}")
        return spec.scale

    def field(self, key: str, kind: type = float) -> Any:
        """A sidecar field with no copy in the model (temperature, offsets...); missing/mistyped: error."""
        if key not in self.sidecar:
            raise ModelFormatError(f"{self.sidecar_path}: field {key!r} missing")
        value = self.sidecar[key]
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
              and math.isfinite(float(value))) if kind is float else isinstance(value, kind)
        if kind is int and isinstance(value, bool):
            ok = False
        if not ok:
            raise ModelFormatError(f"{self.sidecar_path}: field {key!r} is {clip_repr(value)}, expected "
                                   f"{kind.__name__}")
        return float(value) if kind is float else value

    def int_field(self, key: str, default: int, low: int, high: int) -> int:
        """An optional integer sidecar field in ``low..high`` (``default`` when absent); a string, a float,
        NaN or a value out of range is a ModelFormatError (``int()`` of it raised ValueError, or -3 zones
        passed the shape check as (-3)^2 = 9)."""
        value = self.sidecar.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ModelFormatError(f"{self.sidecar_path}: field {key!r} is {clip_repr(value)}, expected an "
                                   f"integer in {low}..{high}")
        return value

    def check_sidecar(self, key: str, model_value: Any) -> None:
        """Raise ModelFormatError when the sidecar has ``key`` and it disagrees with the model's value."""
        if key in self.sidecar and not _same(self.sidecar[key], model_value):
            raise ModelFormatError(f"{self.sidecar_path}: field {key!r} is {self.sidecar[key]!r} but the "
                                   f"model says {model_value!r}")


def load_template(template: str | Path, folder: Path | None = None) -> RoboticsTemplate:
    """Load a template and check its sidecar's copies of the model's quantization and shapes."""
    from libredgetpu_ros.formats import load_model

    compiled_path, twin_path, sidecar_path = template_files(template, folder)
    sidecar = _read_sidecar(sidecar_path)
    try:
        twin = load_model(twin_path, MAX_TEMPLATE_BYTES)
        compiled = load_model(compiled_path, MAX_TEMPLATE_BYTES) if compiled_path is not None else None
    except OSError as exc:
        raise InputError(f"cannot read template {template}: {exc.strerror or exc}") from exc
    if twin.edgetpu_ops():
        raise ModelFormatError(f"{twin_path}: the twin is itself compiled; it must be the uncompiled model")
    boundary = (BoundaryInfo.from_model(compiled, compiled_path) if compiled is not None
                else BoundaryInfo.from_graph(twin, twin_path))
    if len(boundary.inputs) != 1 or len(boundary.inputs[0].shape) != 4:
        raise ModelFormatError(f"{compiled_path or twin_path}: a robotics template takes one [1, H, W, C] "
                               f"image, found inputs {[s.shape for s in boundary.inputs]}")
    result = RoboticsTemplate(name=twin_path.stem, compiled_path=compiled_path, twin_path=twin_path,
                              sidecar_path=sidecar_path, sidecar=sidecar, twin=twin, compiled=compiled,
                              boundary=boundary)
    _check_common(result)
    return result


def _check_common(t: RoboticsTemplate) -> None:
    """The sidecar fields every LibrEdgeTPU template carries, against the model."""
    h, w, c = t.image_shape
    spec_in, spec_out = t.input, t.output
    for key, value in (("input_scale", spec_in.scale), ("input_zero_point", spec_in.zero_point),
                       ("output_scale", spec_out.scale), ("output_zero_point", spec_out.zero_point),
                       ("output_count", int(np.prod(spec_out.shape))), ("channels", c)):
        t.check_sidecar(key, value)
    for prefix in ("", "search_"):
        t.check_sidecar(prefix + "height", h)
        t.check_sidecar(prefix + "width", w)
    twin_in = tensor_spec(t.twin.tensors[t.twin.inputs[0]])
    if twin_in.shape != spec_in.shape or twin_in.dtype != spec_in.dtype:
        raise ModelFormatError(f"{t.twin_path}: input {twin_in.shape} {twin_in.dtype} does not match the "
                               f"compiled model's {spec_in.shape} {spec_in.dtype}")


class TemplateRunner:
    """A template on one backend with versioned, swappable parameters (see the module docstring).

    ``twin_tensors`` names the twin tensors swaps may change (their current values start the store);
    ``backend="none"`` opens nothing (parameters only: ``retarget`` swaps and writes files, never runs);
    ``backend_object`` replaces opening one (tests pass a double that records what it is given), and
    ``blobs`` the compiled blobs to start from (only for such doubles when no compiled model exists);
    ``rate_hz`` the module's share of an Edge TPU other users of the process share (its broker stream's
    weight, the nodes' ``device_share_hz``; 0: unset, ``broker.Stream.weight``), ``stream`` that stream's
    name (its user's, e.g. a node's; "": the compiled model's file).
    """

    def __init__(self, template: RoboticsTemplate, backend: str = "auto", device: Any = None, *,
                 twin_tensors: Sequence[int] = (), backend_object: Any = None,
                 blobs: Mapping[str, np.ndarray] | None = None, cpu_threads: int | None = 1,
                 rate_hz: float = 0.0, stream: str = "") -> None:
        self.template = template
        if backend_object is not None or backend != "none":
            # every module fits its frames through robotics/image.fit_image: a camera-size frame's resize
            # (and a colour frame's luma for a one-channel template) compiled (or loaded) now, not on the
            # first frame; before the backend opens, so a failure here leaves nothing open
            resize_kernels.warm_up()
            if template.image_shape[2] == 1:
                image_kernels.warm_up()
        if backend_object is not None:
            self.backend = backend_object
        elif backend == "none":
            self.backend = None
        else:
            self.backend = _open(template, backend, device, cpu_threads, rate_hz, stream)
        try:
            start_blobs = dict(template.blobs() if blobs is None else blobs)
            twin = {int(i): template.twin.buffer_data(template.twin.tensors[i]) for i in twin_tensors}
            self.store = ParameterStore(start_blobs, twin)
            if self.backend is not None:  # every backend is a reparam.ParameterTarget (backends/base.py)
                self.store.add_target(self.backend)
                if backend_object is None and self.backend_name == "cpu":
                    self._warm_up_twin()
        except BaseException:
            # a backend this runner opened is closed before the error leaves (a caller's double is its own)
            if backend_object is None and self.backend is not None:
                self.backend.close()
            raise

    def _warm_up_twin(self) -> None:
        """One LiteRT invoke on a zero input now: the interpreter's first invoke prepares its kernels and
        touches its arena (2-4x a later frame), which the first real frame would pay. Only the CPU twin: an
        Edge TPU's first run is a device transfer, and a shared one's turns belong to its users."""
        spec = self.template.input
        self.backend.run([np.zeros(spec.shape, spec.dtype)], parameters=self.store.current)

    @property
    def backend_name(self) -> str:
        if self.backend is None:
            return "none"
        return str(getattr(self.backend, "name", type(self.backend).__name__))

    @property
    def parameters(self) -> ParameterSet:
        return self.store.current

    def run(self, inputs: Sequence[np.ndarray],
            parameters: ParameterSet | None = None) -> tuple[dict[str, np.ndarray], ParameterSet]:
        """One inference on one parameter snapshot: (outputs by tensor name, the set they came from);
        ``parameters`` pins the snapshot (a module running several passes per frame keeps one version)."""
        parameters = self.store.current if parameters is None else parameters
        if self.backend is None:
            raise BackendError(f"template {self.template.name} was opened without a backend (parameters "
                               f"only)")
        outputs = self.backend.run(list(inputs), parameters=parameters)
        return outputs, parameters

    def publish(self, blobs: Mapping[str, np.ndarray] | None = None,
                twin: Mapping[int, np.ndarray] | None = None,
                meta: Mapping[str, Any] | None = None) -> ParameterSet:
        """Swap in new blobs / twin tensors (see ``ParameterStore.publish``); returns the new set."""
        return self.store.publish(blobs=blobs, twin=twin, meta=meta)

    def describe(self) -> dict[str, Any]:
        info = dict(self.backend.describe()) if hasattr(self.backend, "describe") else {"backend": "none"}
        info.update(template=self.template.name, parameters_version=self.store.version)
        return info

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()


def _open(template: RoboticsTemplate, backend: str, device: Any, cpu_threads: int | None,
          rate_hz: float, stream: str) -> Any:
    from libredgetpu_ros.backends import KINDS, open_backend

    if backend not in KINDS:
        raise ConfigError(f"backend must be one of {', '.join(KINDS)}, got {backend!r}")
    if template.compiled_path is None:
        if backend == "edgetpu":
            raise ConfigError(f"template {template.name}: no compiled model "
                              f"{template.name}{COMPILED_SUFFIX}, so it cannot run on the Edge TPU (the CPU "
                              f"twin can: backend 'cpu')")
        from libredgetpu_ros.backends.cpu import CpuBackend

        cpu = CpuBackend(num_threads=cpu_threads)
        cpu.load(template.twin_path)
        return cpu
    return open_backend(backend, template.compiled_path, template.twin_path, device=device,
                        cpu_threads=cpu_threads, rate_hz=rate_hz, stream=stream)
