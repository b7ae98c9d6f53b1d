"""Adapters from Femtosense's own runners to :class:`~libredgetpu_ros.femto.runner.SpuRunner`.

Both are optional: they import ``femtodriver`` / ``fmot`` when constructed and raise :class:`BackendError`
naming the missing package otherwise (``pip install femtodriver`` pulls in fmot, femtocrux and torch).

- ``femtodriver``: real SPU hardware through ``femtodriver.SPURunner`` (EVK2 over USB, or a ZCU104 board),
  programmed from a femtofile (``CompiledData.read_from_femtofile``). femtorun's ``FemtoRunner`` base class
  of SPURunner pads, checks the IOSpec and unpads itself; we pass it the padded vectors.
- ``fqir``: fmot's FQIR graph (a ``torch.save`` pickle) run by ``femtodriver.fqir_runner.FQIRArithRunner``,
  bit-exact with the compiled program but on the CPU. That runner only has ``step()``; we collect a sequence's
  inputs and step when the sequence completes (latched inputs keep their last value, 0 at reset).

**Keys, not varnames.** Sends and recvs of this package use IOSpec varnames (as femtorun's simulator does),
but femtodriver 2.6.0 keys its dictionaries otherwise (read from its source, ``fqir_runner.py`` and
``spu_runner.py``): ``FQIRArithRunner`` holds latched values under ``IOSpec.latched_input_names()``, which are
the IOSpec **keys**, and reads a step's inputs by the FQIR graph's input names (``k.name``), which fmot writes
as the keys; its outputs come back under the graph's output names (the output keys). So the ``fqir`` adapter
steps ``{key: vector}`` and maps outputs back to varnames; with the design seed's key ``latchedC`` / varname
``C``, stepping by varname left the latched value unset and ran the graph on a latched write.
``SPURunner.send_inputs`` needs the varname for femtorun's ``sim_send_inputs`` and the key for ``env_SEND``
(``self.io.inputs[name]``), so it works only where they are equal: the ``femtodriver`` adapter refuses a
spec where an input's key and varname differ, and one whose outputs femtorun's ``recv`` cannot serve (no or
two producers, or an output that feeds a sequence: its ``recv_outputs`` asserts on every call).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.errors import BackendError, ConfigError, DeviceError
from libredgetpu_ros.femto.engine import SequenceEngine
from libredgetpu_ros.femto.iospec import IOSpec
from libredgetpu_ros.femto.vectors import int_dtype
from libredgetpu_ros.paths import check_regular
from libredgetpu_ros.textdata import clip


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
        check_regular(path, "femtofile", error=ConfigError)  # femtodriver opens it: a FIFO would block
        self.spec, self.femtofile, self.platform = spec, str(path), platform
        _check_spu_runner_spec(spec)
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


def _check_spu_runner_spec(spec: IOSpec) -> None:
    """What femtodriver's SPURunner cannot run (see the module docstring), refused with the reason."""
    renamed = [f"{clip(k, 60)} (varname {clip(v.name, 60)})" for k, v in spec.inputs.items()
               if str(k) != v.name]
    if renamed:
        raise ConfigError(f"{spec.origin}: femtodriver's SPURunner looks an input up by the name it is sent "
                          "under both for femtorun (the varname) and for env_SEND (the IOSpec key); inputs "
                          f"whose key and varname differ cannot be sent: {', '.join(renamed[:5])}")
    bad = SequenceEngine(spec).unservable
    chained = [v.name for k, v in spec.outputs.items() if spec.graph.succ[spec.graph.index[k]]]
    if bad or chained:
        raise ConfigError(f"{spec.origin}: femtodriver's recv_outputs (femtorun's sim_recv_outputs) asserts "
                          f"on every call for outputs without exactly one producer {clip(list(bad))} or that "
                          f"feed a sequence {clip(chained)}")


class FqirRunner:
    """fmot FQIR graph on the CPU via femtodriver's ``FQIRArithRunner.step``."""

    name = "fqir"

    def __init__(self, spec: IOSpec, fqir: str | Path) -> None:
        torch = _require("torch", "pip install fmot")
        _require("fmot", "pip install fmot")
        fqir_runner = _require("femtodriver.fqir_runner", "pip install femtodriver")
        path = Path(fqir)
        check_regular(path, "FQIR pickle", error=ConfigError)  # torch.load opens it: a FIFO would block
        graph = torch.load(str(path), weights_only=False)  # a pickle the user made with fmot: trusted input
        self.spec, self.fqir = spec, str(path)
        self._runner = fqir_runner.FQIRArithRunner(graph, _femtorun_iospec(spec))
        self._engine = SequenceEngine(spec)
        self._inputs = {v.name: v for v in spec.inputs.values()}
        # femtodriver's keys (module docstring): femtorun's latched inputs and graph tensors by IOSpec key.
        self._latched = {str(k) for k in spec.latched_input_names()}
        self._key = {v.name: str(v.key) for v in spec.inputs.values()}
        self._out_name = {str(k): v.name for k, v in spec.outputs.items()}
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
                if seq_spec.latched:  # femtodriver stores it under the key and does not run the graph
                    self._runner.step({self._key[name]: self._values[name]})
                    continue
                # Streaming inputs by key; latched ones are held by femtodriver (its latched_inputs dict).
                outputs, _ = self._runner.step({self._key[n]: v for n, v in self._values.items()
                                                if self._key[n] not in self._latched})
            except Exception as exc:  # vendor code: one typed error (see FemtodriverRunner._call)
                raise BackendError(f"FQIR step for sequence {seq!r} failed: {type(exc).__name__}: {exc}") \
                    from exc
            self._produced.update({self._out_name.get(str(k), str(k)): np.asarray(v)
                                   for k, v in outputs.items()})

    def recv(self) -> dict[str, np.ndarray]:
        return {n: self._produced.pop(n) for n in self._engine.take_ready() if n in self._produced}

    def describe(self) -> dict:
        return {"runner": self.name, "fqir": self.fqir}

    def close(self) -> None:
        self._runner.finish()
