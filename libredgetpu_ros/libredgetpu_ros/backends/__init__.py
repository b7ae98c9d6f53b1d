"""Backends run the Edge TPU part of a compiled model: on the accelerator, or on the CPU through LiteRT.

``open_backend`` picks one. ``auto`` uses the Edge TPU when one is attached and falls back to the CPU twin
otherwise (and when the accelerator fails to open: held by another process), logging which it chose and
why; a ``device`` named explicitly (an index or "usb:<bus path>", ``edgetpu.device.parse_selector``) must
exist even for ``auto`` (a pinned node never lands on the CPU because of a typo); an accelerator already
open in this process is shared (``edgetpu/broker.py``), never a reason for the CPU. The backend it returns
carries the reason: ``choice`` (why this backend, e.g. "auto: no Edge TPU attached") and ``fallback`` (the
same text when ``auto`` settled for the CPU although the model is compiled for the Edge TPU, else ""); both
are in ``describe()``, so a node can show them in its diagnostics.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any, Literal

from libredgetpu_ros.backends.base import Backend, BoundaryInfo, TensorSpec
from libredgetpu_ros.errors import ConfigError, DeviceError

__all__ = ["Backend", "BackendKind", "BoundaryInfo", "TensorSpec", "edgetpu_attached", "open_backend"]

BackendKind = Literal["auto", "cpu", "edgetpu"]
KINDS: tuple[str, ...] = ("auto", "cpu", "edgetpu")

_log = logging.getLogger(__name__)


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


def _chosen(backend: Backend, choice: str, fallback: bool = False) -> Backend:
    backend.choice = choice  # type: ignore[attr-defined]
    backend.fallback = choice if fallback else ""  # type: ignore[attr-defined]
    return backend


def _open_device(device: Any) -> bool:
    """True when ``device`` is an accelerator already open in this process (a ``DeviceBroker`` or an
    ``EdgeTpuDevice``), not a selector to open."""
    from libredgetpu_ros.edgetpu.broker import DeviceBroker
    from libredgetpu_ros.edgetpu.device import EdgeTpuDevice

    return isinstance(device, DeviceBroker | EdgeTpuDevice)


def _open_edgetpu(module, model_path: Path, cpu_model_path: Path | None, device: Any,
                  rate_hz: float) -> Backend:
    backend = module.EdgeTpuBackend(device=device, rate_hz=rate_hz)
    try:
        backend.load(model_path, cpu_model_path)
    except BaseException:
        backend.close()
        raise
    return backend


def open_backend(kind: str, model_path: Path | str, cpu_model_path: Path | str | None = None,
                 device: Any = None, logger: logging.Logger | None = None,
                 cpu_threads: int | None = None, rate_hz: float = 0.0) -> Backend:
    """A loaded backend of ``kind`` ("auto" | "cpu" | "edgetpu") for the compiled model ``model_path``;
    ``cpu_threads`` is LiteRT's thread count when the CPU runs it (None: LiteRT's default); ``rate_hz`` the
    backend's weight on a shared accelerator (``edgetpu/broker.py``; 0: an equal share)."""
    log = logger or _log
    if kind not in KINDS:
        raise ConfigError(f"backend must be one of {', '.join(KINDS)}, got {kind!r}")
    model_path = Path(model_path)
    cpu_path = Path(cpu_model_path) if cpu_model_path is not None else None

    pinned = device is not None and not _open_device(device)
    if pinned:
        from libredgetpu_ros.edgetpu.device import parse_selector

        pinned = parse_selector(device) is not None  # a malformed one is a ConfigError naming it, any kind
    if kind == "cpu":
        log.info("backend: cpu (requested) for %s", model_path.name)
        return _chosen(_open_cpu(model_path, cpu_path, cpu_threads), "cpu (requested)")

    module = _edgetpu_module()
    if kind == "edgetpu":
        if module is None:
            from libredgetpu_ros.errors import BackendError

            raise BackendError("the Edge TPU backend is not part of this build (backends/edgetpu.py missing)")
        log.info("backend: edgetpu (requested) for %s", model_path.name)
        return _chosen(_open_edgetpu(module, model_path, cpu_path, device, rate_hz), "edgetpu (requested)")

    if module is not None and pinned:  # a device named in the config exists, or the open fails naming it
        from libredgetpu_ros.edgetpu.device import select_device

        select_device(device)  # DeviceNotFoundError: "no Edge TPU matches device '3'; attached: 0=usb:..."
    if module is None:
        reason = "auto: no Edge TPU backend in this build"
    elif _open_device(device):  # an accelerator open in this process was handed over: share it
        log.info("backend: edgetpu for %s (auto: shared accelerator)", model_path.name)
        backend = _open_edgetpu(module, model_path, cpu_path, device, rate_hz)
        return _chosen(backend, "auto: shared accelerator")
    elif not module.edgetpu_available():
        reason = "auto: no Edge TPU attached (libredgetpu-ros devices)"
    else:
        try:
            backend = _open_edgetpu(module, model_path, cpu_path, device, rate_hz)
        except DeviceError as exc:
            reason = f"auto: the Edge TPU failed to open: {exc}"
        else:
            log.info("backend: edgetpu for %s (auto: accelerator attached)", model_path.name)
            return _chosen(backend, "auto: accelerator attached")
    log.warning("backend: cpu for %s (%s)", model_path.name, reason)
    return _chosen(_open_cpu(model_path, cpu_path, cpu_threads), reason, fallback=True)
