"""Runs a Dense template on an Edge TPU through the project's driver, keeping the cached blob in step.

The device caches the PARAMETER_CACHING blob under ``(parameter_caching_token, version)``: ``load_parameters``
is a no-op when that key is already resident, so a matmul on a snapshot always runs with its own weights even
when a swap happened in between (it re-uploads the snapshot's blob if needed).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from libredgetpu_ros.errors import DeviceError
from libredgetpu_ros.matmul.template import DenseTemplate


class EdgeTpuRunner:
    """One open device and the template's executables; every call holds the device lock."""

    def __init__(self, template: DenseTemplate, device: Any = None) -> None:
        from libredgetpu_ros.edgetpu.device import EdgeTpuDevice

        self._caching, self._execution = template.executables
        self._rows = template.rows
        self._device = EdgeTpuDevice.open(device)
        self._lock = threading.Lock()

    def _ensure(self, blob: np.ndarray, version: int) -> None:
        self._device.load_parameters(self._caching, parameters=memoryview(blob),
                                     cache_key=(self._caching.parameter_caching_token, version))

    def upload(self, blob: np.ndarray, version: int) -> None:
        """Make ``blob`` the resident parameters (called by the swap before it publishes the new state)."""
        with self._lock:
            self._ensure(blob, version)

    def run(self, blob: np.ndarray, version: int, xq: np.ndarray) -> np.ndarray:
        """uint8 outputs (k, rows) for uint8 inputs (k, cols), one inference per row of ``xq``."""
        out = np.empty((xq.shape[0], self._rows), dtype=np.uint8)
        with self._lock:
            self._ensure(blob, version)
            for i, sample in enumerate(xq):
                raw = self._device.execute(self._execution, [sample.tobytes()])
                values = np.frombuffer(raw[0], dtype=np.uint8)
                if values.size < self._rows:
                    raise DeviceError(f"Edge TPU returned {values.size} output bytes, expected {self._rows}")
                out[i] = values[: self._rows]
        return out

    def close(self) -> None:
        with self._lock:
            self._device.close()
