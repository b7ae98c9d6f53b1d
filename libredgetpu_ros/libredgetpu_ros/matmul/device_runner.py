"""Runs a Dense template on an Edge TPU through the project's driver, keeping the cached blob in step.

The device caches the PARAMETER_CACHING blob under the parameter set's ``key`` (store id, version):
``load_parameters`` is a no-op when that key is already resident, so a matmul on a snapshot always runs with
its own weights even when a swap happened in between (it re-uploads the snapshot's blob if needed), and two
engines on one template never take each other's weights for their own (their stores differ). The device is
the process's shared one (``edgetpu/broker.py``): engines and the camera nodes of one process take turns.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from libredgetpu_ros.errors import DeviceError
from libredgetpu_ros.matmul.template import DenseTemplate
from libredgetpu_ros.reparam import ParameterSet


class EdgeTpuRunner:
    """The ``edgetpu`` MatMul runner (``matmul/runners.py``): a stream on the process's shared device and the
    template's executables; a call's parameter upload and its inferences run as one request (no other
    user's run comes in between)."""

    name = "edgetpu"
    choice = ""  # set by backends.choose
    fallback = ""

    def __init__(self, template: DenseTemplate, device: Any = None, transport_factory: Any = None,
                 rate_hz: float = 0.0, stream: str = "") -> None:
        """``device``: index, bus path or None (the first attached), or a ``DeviceBroker`` to share;
        ``rate_hz``: this engine's weight on the shared device (its stream's, ``edgetpu/broker.py``; 0: unset,
        ``broker.Stream.weight``); ``stream``: that stream's name ("": ``matmul <template>``)."""
        from libredgetpu_ros.edgetpu.broker import open_shared

        self._caching, self._execution = template.executables
        self._rows = template.rows
        self._broker = open_shared(device, transport_factory=transport_factory)
        self._stream = self._broker.stream(stream or f"matmul {template.name}", rate_hz)
        self._lock = threading.Lock()

    def _ensure(self, device: Any, parameters: ParameterSet) -> None:
        device.load_parameters(self._caching, parameters=memoryview(parameters.blob("pc")),
                               cache_key=parameters.key)

    def stage(self, parameters: ParameterSet) -> None:
        """Make the set's blob the resident parameters (the store calls it before it publishes the set)."""
        with self._lock:
            self._stream.run(lambda device: self._ensure(device, parameters), self._caching.name)

    def run(self, xq: np.ndarray, parameters: ParameterSet) -> np.ndarray:
        """uint8 outputs (k, rows) for uint8 inputs (k, cols), one inference per row of ``xq``."""
        out = np.empty((xq.shape[0], self._rows), dtype=np.uint8)

        def infer(device: Any) -> np.ndarray:
            self._ensure(device, parameters)
            for i, sample in enumerate(xq):
                raw = device.execute(self._execution, [sample.tobytes()])
                values = np.frombuffer(raw[0], dtype=np.uint8)
                if values.size < self._rows:
                    raise DeviceError(f"Edge TPU returned {values.size} output bytes, expected {self._rows}")
                out[i] = values[: self._rows]
            return out

        with self._lock:
            return self._stream.run(infer, self._caching.name)

    def shared_status(self) -> dict[str, Any]:
        """This runner's stream on the shared device and the device's users, faults and reopens (the
        camera backends' ``shared_status``); {} once closed."""
        stream = self._stream  # close() may run meanwhile (diagnostics thread)
        return {} if stream is None else stream.status()

    @property
    def device(self) -> Any:
        """The shared device's broker (to hand to other users in the process)."""
        return self._broker

    def close(self) -> None:
        with self._lock:
            stream, self._stream = self._stream, None
            if stream is not None:
                stream.close()
                self._broker.release()
