"""The MatMulEngine's runners by name: a registry that the accelerator families fill.

A runner executes the Dense template for the engine: ``upload(blob, version)`` before a swap publishes,
``run(blob, version, xq) -> uint8 (k, rows)`` on the snapshot a call took, ``close()``. ``cpu`` (the engine's
own integer twin, no runner object) and ``edgetpu`` (``matmul.device_runner``, over ``edgetpu/``) are
matmul's own. Other families declare theirs as entry points of the group ``libredgetpu_ros.matmul_runners``
in their package's setup.py (``tpulang = libredgetpu_ros.sophgo.matmul_runner:TpuLangRunner``), or call
:func:`register_runner` at import time; either way ``matmul/`` never imports them, so no import cycle
runs through the engine (sophgo's exporter imports the engine).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Protocol

import numpy as np

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.matmul.template import DenseTemplate

ENTRY_POINT_GROUP = "libredgetpu_ros.matmul_runners"


class Runner(Protocol):
    def upload(self, blob: np.ndarray, version: int) -> None: ...
    def run(self, blob: np.ndarray, version: int, xq: np.ndarray) -> np.ndarray: ...
    def close(self) -> None: ...


# (template, device) -> runner, or None for the engine's own CPU twin.
RunnerFactory = Callable[[DenseTemplate, Any], "Runner | None"]

_lock = threading.Lock()
_factories: dict[str, RunnerFactory] = {}


def register_runner(name: str, factory: RunnerFactory) -> None:
    """Make ``factory`` the runner called ``name`` (a later registration of the same name replaces it)."""
    if not name or name == "auto":
        raise ConfigError(f"runner name {name!r} is reserved or empty")
    with _lock:
        _factories[name] = factory


def _cpu_twin(template: DenseTemplate, device: Any) -> None:
    return None


def _edgetpu(template: DenseTemplate, device: Any) -> Runner:
    from libredgetpu_ros.matmul.device_runner import EdgeTpuRunner

    return EdgeTpuRunner(template, device)


register_runner("cpu", _cpu_twin)
register_runner("edgetpu", _edgetpu)


def _declared() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def runner_names() -> tuple[str, ...]:
    """Every runner name the engine accepts (registered ones and declared entry points), sorted."""
    with _lock:
        names = set(_factories)
    return tuple(sorted(names | set(_declared())))


def runner_factory(name: str) -> RunnerFactory:
    """The factory registered or declared as ``name``; ConfigError listing the known names otherwise."""
    with _lock:
        factory = _factories.get(name)
    if factory is not None:
        return factory
    declared = _declared().get(name)
    if declared is None:
        raise ConfigError(f"MatMul backend {name!r} is unknown; known: 'auto', "
                          f"{', '.join(repr(n) for n in runner_names())}")
    try:
        factory = declared.load()
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"MatMul backend {name!r} is declared as {declared.value} but does not load: "
                          f"{exc}") from exc
    register_runner(name, factory)
    return factory
