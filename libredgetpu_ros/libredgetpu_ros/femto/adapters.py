"""Adapters from Femtosense's own runners to :class:`~libredgetpu_ros.femto.runner.SpuRunner`.

Both are optional: they import ``femtodriver`` / ``fmot`` when constructed and raise :class:`BackendError`
naming the missing package otherwise (``pip install femtodriver`` pulls in fmot, femtocrux and torch).

- ``femtodriver``: real SPU hardware through ``femtodriver.SPURunner`` (EVK2 over USB, or a ZCU104 board),
  programmed from a femtofile (``CompiledData.read_from_femtofile``). femtorun's ``FemtoRunner`` base class
  of SPURunner pads, checks the IOSpec and unpads itself; we pass it the padded vectors.
- ``fqir``: fmot's FQIR graph (a ``torch.save`` pickle) run by ``femtodriver.fqir_runner.FQIRArithRunner``,
  bit-exact with the compiled program but on the CPU. That runner only has ``step()``; we collect a sequence's
  inputs and step when the sequence completes (latched inputs keep their last value, 0 at reset).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.errors import BackendError, ConfigError, DeviceError, not_a_file
from libredgetpu_ros.femto.engine import SequenceEngine
from libredgetpu_ros.femto.iospec import IOSpec
from libredgetpu_ros.femto.vectors import int_dtype


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BackendError(f"runner needs {module!r} ({extra}); not importable: {exc}") from None


def _femtorun_iospec(spec: IOSpec) -> Any:
    femtorun = _require("femtorun", "pip install femtorun")
    if not Path(spec.origin).is_file():
        raise ConfigError(f"runner needs the IOSpec as a file, got {spec.origin!r}")
    return femtorun.IOSpec(spec.origin)


class FemtodriverRunner:
    """femtodriver's hardware runner (``SPURunner``) behind the SpuRunner interface."""

    name = "femtodriver"

    def __init__(self, spec: IOSpec, femtofile: str | Path, platform: str = "evk2",
                 hardware_address: str | None = None, **runner_kwargs: Any) -> None:
        fd = _require("femtodriver", "pip install femtodriver; needs an SPU board")
        path = Path(femtofile)
        if not path.is_file():
            raise ConfigError(not_a_file("femtofile", path))
        self.spec, self.femtofile, self.platform = spec, str(path), platform
        try:
            compiled = fd.CompiledData.read_from_femtofile(str(path))
            self._runner = fd.SPURunner(compiled, platform=platform, hardware_address=hardware_address,
                                        **runner_kwargs)
        except (OSError, RuntimeError, NotImplementedError) as exc:
            raise DeviceError(f"femtodriver could not open the SPU ({platform}): {exc}") from exc

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        # Vendor code raises anything (AssertionError in env_SEND, RuntimeError, USB errors): one typed error
        # for the node, which counts it and resets instead of dying in a callback.
        try:
            return fn(*args)
        except Exception as exc:
            raise DeviceError(f"femtodriver {what} failed ({self.platform}): {type(exc).__name__}: {exc}") \
                from exc

    def reset(self) -> None:
        self._call("reset", self._runner.reset)

    def send(self, name: str, vector: np.ndarray) -> None:
        self._call(f"send of {name!r}", self._runner.send_inputs, {name: np.asarray(vector)})

    def recv(self) -> dict[str, np.ndarray]:
        return dict(self._call("recv", self._runner.recv_outputs))

    def describe(self) -> dict:
        return {"runner": self.name, "femtofile": self.femtofile, "platform": self.platform}

    def close(self) -> None:
        self._runner.finish()


class FqirRunner:
    """fmot FQIR graph on the CPU via femtodriver's ``FQIRArithRunner.step``."""

    name = "fqir"

    def __init__(self, spec: IOSpec, fqir: str | Path) -> None:
        torch = _require("torch", "pip install fmot")
        _require("fmot", "pip install fmot")
        fqir_runner = _require("femtodriver.fqir_runner", "pip install femtodriver")
        path = Path(fqir)
        if not path.is_file():
            raise ConfigError(not_a_file("FQIR pickle", path))
        graph = torch.load(str(path), weights_only=False)  # a pickle the user made with fmot: trusted input
        self.spec, self.fqir = spec, str(path)
        self._runner = fqir_runner.FQIRArithRunner(graph, _femtorun_iospec(spec))
        self._engine = SequenceEngine(spec)
        self._inputs = {v.name: v for v in spec.inputs.values()}
        self._values: dict[str, np.ndarray] = {}
        self._produced: dict[str, np.ndarray] = {}

    def reset(self) -> None:
        self._runner.reset()
        self._engine.reset()
        self._values = {n: np.zeros(v.length, int_dtype(v.precision)) for n, v in self._inputs.items()}
        self._produced.clear()

    def send(self, name: str, vector: np.ndarray) -> None:
        fired = self._engine.send(name)
        self._values[name] = np.asarray(vector)[: self._inputs[name].length]
        for seq in fired:
            seq_spec = next(s for s in self.spec.sequences if s.key == seq)
            try:
                if seq_spec.latched:
                    self._runner.step({name: self._values[name]})  # updates the runner's latched copy
                    continue
                outputs, _ = self._runner.step(dict(self._values))
            except Exception as exc:  # vendor code: one typed error (see FemtodriverRunner._call)
                raise BackendError(f"FQIR step for sequence {seq!r} failed: {type(exc).__name__}: {exc}") \
                    from exc
            self._produced.update({k: np.asarray(v) for k, v in outputs.items()})

    def recv(self) -> dict[str, np.ndarray]:
        return {n: self._produced.pop(n) for n in self._engine.recv() if n in self._produced}

    def describe(self) -> dict:
        return {"runner": self.name, "fqir": self.fqir}

    def close(self) -> None:
        self._runner.finish()
