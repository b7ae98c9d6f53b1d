"""The MatMulEngine's runners by name: a registry that the accelerator families fill.

A runner is an accelerator runner in the package's one vocabulary (``backends/__init__.py``): a
``reparam.ParameterTarget`` whose ``stage(parameters)`` makes a ``ParameterSet`` (the blob under
``blob("pc")``, its ``key`` and ``version``) usable before the engine's store publishes it, ``run(xq,
parameters) -> uint8 (k, rows)`` on the set a call took, ``close()``; ``choose`` sets its ``choice`` and
``fallback``. ``cpu`` (``matmul.twin.TwinRunner``, the integer twin) and ``edgetpu``
(``matmul.device_runner``, over ``edgetpu/``) are matmul's own. Other families declare theirs as entry
points of the group ``libredgetpu_ros.matmul_runners`` in their package's setup.py (``tpulang =
libredgetpu_ros.sophgo.matmul_runner:open_tpulang_runner``), or call :func:`register_runner` at import time;
either way ``matmul/`` never imports them, so no import cycle runs through the engine (sophgo's exporter
imports the engine). :func:`open_runner` refuses a runner that is not a ``ParameterTarget``. A runner on the
process's shared Edge TPU (``edgetpu``: a stream of ``edgetpu/broker.py``) is registered with
``weighted=True``: its factory also takes ``rate_hz``, the engine's weight on that device (the nodes'
``device_share_hz``; 0: unset, ``broker.Stream.weight``), and ``stream``, its stream's name there (the
engine's user's, e.g. a node's; "": ``matmul <template>``); the others never see them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

import numpy as np

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.matmul.template import DenseTemplate
from libredgetpu_ros.reparam import ParameterSet, ParameterTarget

ENTRY_POINT_GROUP = "libredgetpu_ros.matmul_runners"


@runtime_checkable
class Runner(ParameterTarget, Protocol):
    """A MatMul runner (see the module docstring)."""

    def stage(self, parameters: ParameterSet) -> None:
        """Make the set's blob usable (an upload) before the engine publishes it; raise to refuse it."""

    def run(self, xq: np.ndarray, parameters: ParameterSet) -> np.ndarray:
        """uint8 outputs (k, rows) for uint8 inputs ``xq`` (k, cols) with the weights of ``parameters``."""

    def close(self) -> None: ...


# (template, device) -> runner
RunnerFactory = Callable[[DenseTemplate, Any], Runner]

_lock = threading.Lock()
_factories: dict[str, RunnerFactory] = {}
_weighted: set[str] = set()  # runners whose factory takes rate_hz (a stream on a shared device)


def register_runner(name: str, factory: RunnerFactory, *, weighted: bool = False) -> None:
    """Make ``factory`` the runner called ``name`` (a later registration of the same name replaces it);
    ``weighted``: it runs on a device shared through ``edgetpu/broker.py`` and its factory takes the keywords
    ``rate_hz`` and ``stream`` (see the module docstring)."""
    if not name or name == "auto":
        raise ConfigError(f"runner name {name!r} is reserved or empty")
    with _lock:
        _factories[name] = factory
        if weighted:
            _weighted.add(name)
        else:
            _weighted.discard(name)


def _cpu_twin(template: DenseTemplate, device: Any) -> Runner:
    from libredgetpu_ros.matmul.twin import TwinRunner

    return TwinRunner(template.quant)


def _edgetpu(template: DenseTemplate, device: Any, rate_hz: float = 0.0, stream: str = "") -> Runner:
    from libredgetpu_ros.matmul.device_runner import EdgeTpuRunner

    return EdgeTpuRunner(template, device, rate_hz=rate_hz, stream=stream)


register_runner("cpu", _cpu_twin)
register_runner("edgetpu", _edgetpu, weighted=True)


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


def open_runner(name: str, template: DenseTemplate, device: Any, rate_hz: float = 0.0,
                stream: str = "") -> Runner:
    """The runner ``name`` for ``template`` (``rate_hz``: its weight on a shared device and ``stream`` its
    stream's name there, for a runner registered ``weighted``); a ConfigError (the runner closed) when it is
    not a ``ParameterTarget`` with ``run`` and ``close``: it would miss the weights a swap publishes."""
    factory = runner_factory(name)
    with _lock:
        weighted = name in _weighted
    runner = (factory(template, device, rate_hz=rate_hz, stream=stream) if weighted
              else factory(template, device))
    missing = [m for m in ("stage", "run", "close") if not callable(getattr(runner, m, None))]
    if missing:
        close = getattr(runner, "close", None)
        if callable(close):
            close()
        raise ConfigError(f"MatMul backend {name!r} gives a {type(runner).__name__} without "
                          f"{', '.join(missing)}: a runner is a reparam.ParameterTarget (stage(parameters), "
                          f"run(xq, parameters), close(); matmul/runners.py)")
    return runner
