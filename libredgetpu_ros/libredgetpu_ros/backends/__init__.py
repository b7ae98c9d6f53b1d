"""Backends run the Edge TPU part of a compiled model: on the accelerator, or on the CPU through LiteRT.

One vocabulary for every accelerator runner of the package (these backends and MatMul's runners,
``matmul/runners.py``): a runner is a ``reparam.ParameterTarget`` (``stage(set)`` before a parameter set is
published, ``run`` with a set), and ``choose`` is the one place that turns a requested kind into one.
``auto`` takes the Edge TPU when one is attached and opens, else the CPU (also when the accelerator fails to
open: held by another process), logging which and why; a ``device`` named explicitly (an index or
"usb:<bus path>", ``edgetpu.device.parse_selector``) must exist even for ``auto`` (a pinned node never lands
on the CPU because of a typo); an accelerator already open in this process is shared (``edgetpu/broker.py``),
never a reason for the CPU; a kind asked for by name ("edgetpu") never falls back. The runner carries the
reason: ``choice`` (why this runner, e.g. "auto: no Edge TPU attached") and ``fallback`` (the same text when
``auto`` settled for the CPU, else ""), so a node can show them in its diagnostics.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

from libredgetpu_ros.backend_kinds import BACKEND_KINDS
from libredgetpu_ros.backends.base import Backend, BoundaryInfo, TensorSpec
from libredgetpu_ros.errors import ConfigError, DeviceError

__all__ = ["Backend", "BackendKind", "BoundaryInfo", "TensorSpec", "choose", "edgetpu_attached",
           "open_backend"]

BackendKind = Literal["auto", "cpu", "edgetpu"]
KINDS: tuple[str, ...] = BACKEND_KINDS

_log = logging.getLogger(__name__)
_Runner = TypeVar("_Runner")


def _edgetpu_module():
    """The Edge TPU backend module, or None when this build does not ship it."""
    name = "libredgetpu_ros.backends.edgetpu"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        return None


def edgetpu_attached() -> bool:
    """True when the Edge TPU backend is built in and sees an accelerator."""
    module = _edgetpu_module()
    return module is not None and bool(module.edgetpu_available())


def _open_cpu(model_path: Path, cpu_model_path: Path | None, cpu_threads: int | None = None) -> Backend:
    from libredgetpu_ros.backends.cpu import CpuBackend

    backend = CpuBackend(num_threads=cpu_threads)
    backend.load(model_path, cpu_model_path)
    return backend


def _chosen(runner: _Runner, choice: str, fallback: bool = False) -> _Runner:
    runner.choice = choice  # type: ignore[attr-defined]
    runner.fallback = choice if fallback else ""  # type: ignore[attr-defined]
    return runner


def _open_device(device: Any) -> bool:
    """True when ``device`` is an accelerator already open in this process (a ``DeviceBroker`` or an
    ``EdgeTpuDevice``), not a selector to open."""
    from libredgetpu_ros.edgetpu.broker import DeviceBroker
    from libredgetpu_ros.edgetpu.device import EdgeTpuDevice

    return isinstance(device, DeviceBroker | EdgeTpuDevice)


def _open_edgetpu(module, model_path: Path, cpu_model_path: Path | None, device: Any,
                  rate_hz: float, stream: str) -> Backend:
    backend = module.EdgeTpuBackend(device=device, rate_hz=rate_hz, stream=stream)
    try:
        backend.load(model_path, cpu_model_path)
    except BaseException:
        backend.close()
        raise
    return backend


def choose(kind: str, device: Any, open_runner: Callable[[str], _Runner], what: str,
           logger: logging.Logger | None = None, no_cpu: str = "") -> _Runner:
    """The runner of ``kind`` opened by ``open_runner(name)`` ("cpu", "edgetpu" or, when asked for by name,
    another family's runner), with ``choice`` and ``fallback`` set (see the module docstring); ``what``
    names the model in the log line. ``kind`` is checked by the caller (each has its own list of names).
    ``no_cpu``: why the CPU cannot run this model (e.g. Edge TPU segments without a CPU twin); then where
    ``auto`` would fall back to the CPU it raises ``DeviceNotFoundError`` with that and auto's reason."""
    log = logger or _log
    if kind not in KINDS:  # a family's runner asked for by name: the device means what that family says
        log.info("backend: %s (requested) for %s", kind, what)
        return _chosen(open_runner(kind), f"{kind} (requested)")
    pinned = device is not None and not _open_device(device)
    if pinned:
        from libredgetpu_ros.edgetpu.device import parse_selector

        pinned = parse_selector(device) is not None  # a malformed one is a ConfigError naming it, any kind
    module = _edgetpu_module()
    if kind == "edgetpu" and module is None:
        from libredgetpu_ros.errors import BackendError

        raise BackendError("the Edge TPU backend is not part of this build (backends/edgetpu.py missing)")
    if kind != "auto":
        log.info("backend: %s (requested) for %s", kind, what)
        return _chosen(open_runner(kind), f"{kind} (requested)")

    if module is not None and pinned:  # a device named in the config exists, or the open fails naming it
        from libredgetpu_ros.edgetpu.device import select_device

        select_device(device)  # DeviceNotFoundError: "no Edge TPU matches device '3'; attached: 0=usb:..."
    if module is None:
        reason = "auto: no Edge TPU backend in this build"
    elif _open_device(device):  # an accelerator open in this process was handed over: share it
        log.info("backend: edgetpu for %s (auto: shared accelerator)", what)
        return _chosen(open_runner("edgetpu"), "auto: shared accelerator")
    elif not module.edgetpu_available():
        reason = "auto: no Edge TPU attached (libredgetpu-ros devices)"
    else:
        try:
            runner = open_runner("edgetpu")
        except DeviceError as exc:
            reason = f"auto: the Edge TPU failed to open: {exc}"
        else:
            log.info("backend: edgetpu for %s (auto: accelerator attached)", what)
            return _chosen(runner, "auto: accelerator attached")
    if no_cpu:
        from libredgetpu_ros.errors import DeviceNotFoundError

        raise DeviceNotFoundError(f"{no_cpu} and {reason.removeprefix('auto: ')}")
    log.warning("backend: cpu for %s (%s)", what, reason)
    return _chosen(open_runner("cpu"), reason, fallback=True)


def open_backend(kind: str, model_path: Path | str, cpu_model_path: Path | str | None = None,
                 device: Any = None, logger: logging.Logger | None = None,
                 cpu_threads: int | None = None, rate_hz: float = 0.0, no_cpu: str = "",
                 stream: str = "") -> Backend:
    """A loaded backend of ``kind`` ("auto" | "cpu" | "edgetpu", resolved by :func:`choose`) for the
    compiled model ``model_path``; ``cpu_threads`` is LiteRT's thread count when the CPU runs it (None:
    LiteRT's default); ``rate_hz`` the backend's weight on a shared accelerator (``edgetpu/broker.py``;
    0: unset, ``broker.Stream.weight``) and ``stream`` its stream's name there (the user's, e.g. a node's;
    "": the model file); ``no_cpu``: see :func:`choose`."""
    if kind not in KINDS:
        raise ConfigError(f"backend must be one of {', '.join(KINDS)}, got {kind!r}")
    model_path = Path(model_path)
    cpu_path = Path(cpu_model_path) if cpu_model_path is not None else None

    def open_runner(name: str) -> Backend:
        if name == "cpu":
            return _open_cpu(model_path, cpu_path, cpu_threads)
        return _open_edgetpu(_edgetpu_module(), model_path, cpu_path, device, rate_hz, stream)

    return choose(kind, device, open_runner, model_path.name, logger, no_cpu)
