"""Edge TPU backend: a compiled model's ``edgetpu-custom-op`` run on a Coral USB accelerator.

``run(inputs, parameters)`` takes a ``reparam.ParameterSet``: its PARAMETER_CACHING blob is uploaded under
the set's key (once per version; ``stage`` does it when the set is published) and its EXECUTION_ONLY /
STAND_ALONE blob is streamed with the instructions in place of the compiled one.

The accelerator is shared: a backend that opens a device by selector (or transport) runs through the
process's ``edgetpu.broker`` for that device (one open per physical accelerator per process, requests of
every backend scheduled fairly, newest per stream), so a second camera node in the process shares the device
instead of failing to open it (and ``auto`` never falls back to the CPU for that reason).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from libredgetpu_ros.backends.base import BoundaryInfo, TensorSpec, check_inputs
from libredgetpu_ros.errors import BackendError, DeviceError, ModelFormatError


def edgetpu_available() -> bool:
    """Cheap check for "auto": libusb loads and an accelerator (running or bootloader) is attached."""
    try:
        from libredgetpu_ros.edgetpu.device import list_devices

        return bool(list_devices())
    except DeviceError:
        return False


def _match_layers(layers: Sequence[Any], specs: Sequence[TensorSpec], what: str, where: str) -> list[Any]:
    """Executable layers in the order of the TFLite op's tensors: by name, else by position."""
    by_name = {layer.name: layer for layer in layers}
    if all(spec.name in by_name for spec in specs):
        return [by_name[spec.name] for spec in specs]
    if len(layers) != len(specs):
        raise ModelFormatError(
            f"{where}: the Edge TPU op has {len(specs)} {what} tensors but its executable "
            f"has {len(layers)} {what} layers"
        )
    return list(layers)


class EdgeTpuBackend:
    """Runs the Edge TPU op of one model; outputs keyed by TFLite tensor name, quantized, dense."""

    name = "edgetpu"
    choice = ""  # why open_backend picked it (backends/__init__)
    fallback = ""

    def __init__(self, device: Any = None, firmware: Path | None = None, transport=None,
                 transport_factory=None, stream: str = "", rate_hz: float = 0.0) -> None:
        """``device``: index, bus path or None (first found), opened through the process's broker of that
        accelerator (shared with every other backend on it); a ``DeviceBroker`` to share; or an open
        ``EdgeTpuDevice`` to borrow directly (not closed by this backend).

        ``transport`` / ``transport_factory`` replace USB discovery (tests, the simulated accelerator); a
        factory lets the broker reopen after a fault. ``stream`` names this backend's requests on the broker
        (default: the model file), ``rate_hz`` its share of the device (0: unset, ``broker.Stream.weight``).
        """
        from libredgetpu_ros.edgetpu.broker import DeviceBroker
        from libredgetpu_ros.edgetpu.device import EdgeTpuDevice

        self._owns_device = not isinstance(device, EdgeTpuDevice)
        self._broker: Any = device if isinstance(device, DeviceBroker) else None
        self._selector = device if self._owns_device and self._broker is None else None
        self._firmware = firmware
        if transport_factory is None and transport is not None:
            transport_factory = lambda: transport  # noqa: E731 (a reopen after a fault gets the same one)
        self._transport_factory = transport_factory
        self._stream_name, self._rate_hz = stream, rate_hz
        self._stream: Any = None
        self._device: Any = None if self._owns_device else device
        self._package: Any = None
        self.boundary: BoundaryInfo | None = None
        self._in_layers: list[Any] = []
        self._out_layers: list[Any] = []
        self._model_path: Path | None = None
        self._cpu_model_path: Path | None = None
        self.last_latency_ms: float | None = None
        self._versioned: tuple[Any, Any] | None = None  # (ParameterSet.key, package with its eo/sa blobs)

    def load(self, model_path: Path, cpu_model_path: Path | None = None) -> None:
        from libredgetpu_ros.formats import load_model

        model_path = Path(model_path)
        model = load_model(model_path)
        boundary = BoundaryInfo.from_model(model, model_path)
        package = model.darwinn(model.edgetpu_ops()[0])
        runnable = package.runnable
        in_layers = _match_layers(runnable.input_layers, boundary.inputs, "input", str(model_path))
        out_layers = _match_layers(runnable.output_layers, boundary.outputs, "output", str(model_path))
        for spec, layer in zip(boundary.inputs, in_layers, strict=True):
            nbytes = int(np.prod(spec.shape)) * spec.dtype.itemsize
            if nbytes > layer.size_bytes:
                raise ModelFormatError(
                    f"{model_path}: input {spec.name!r} has {nbytes} bytes but its layer "
                    f"{layer.name!r} takes {layer.size_bytes}"
                )
        if self._device is None and self._stream is None:
            self._open_shared(model_path)
        # only replace the loaded model once everything above succeeded
        self._package, self.boundary = package, boundary
        self._in_layers, self._out_layers = in_layers, out_layers
        self._model_path, self._cpu_model_path = model_path, cpu_model_path
        self._versioned = None

    def _open_shared(self, model_path: Path) -> None:
        """Join (or open) the process's broker of the selected accelerator and make this backend's stream."""
        from libredgetpu_ros.edgetpu.broker import open_shared

        self._broker = open_shared(self._broker if self._broker is not None else self._selector,
                                   self._firmware, self._transport_factory)
        self._stream = self._broker.stream(self._stream_name or model_path.name, self._rate_hz)

    def _call(self, fn: Any, model: Any = None) -> Any:
        """``fn(device)`` on the shared device (through the broker) or on the borrowed one."""
        if self._stream is not None:
            return self._stream.run(fn, model)
        return fn(self._device)

    def _package_for(self, parameters: Any) -> Any:
        """The loaded package with the set's EXECUTION_ONLY / STAND_ALONE parameters in place of its own."""
        from libredgetpu_ros.reparam import BLOB_KIND_OF

        cached = self._versioned
        if cached is not None and cached[0] == parameters.key:
            return cached[1]
        executables = []
        for exe in self._package.executables:
            kind = BLOB_KIND_OF[exe.type]
            blob = None if kind == "pc" else parameters.blob(kind)  # "pc" is uploaded, not streamed (stage)
            if blob is not None and len(blob) != len(exe.parameters):
                raise ModelFormatError(f"{self._model_path}: new {kind!r} blob has {len(blob)} "
                                       f"bytes, the executable takes {len(exe.parameters)}")
            executables.append(exe if blob is None else dataclasses.replace(exe, parameters=memoryview(blob)))
        package = dataclasses.replace(self._package, executables=executables)
        self._versioned = (parameters.key, package)
        return package

    def stage(self, parameters: Any) -> None:
        """Upload a ``reparam.ParameterSet``'s PARAMETER_CACHING blob before it is published."""
        if self._package is None:
            raise BackendError("EdgeTpuBackend.stage called before load()")
        caching = self._package.parameter_caching
        blob = parameters.blob("pc")
        if caching is not None and blob is not None and parameters.version != 0:
            self._call(lambda dev: dev.load_parameters(caching, memoryview(blob), cache_key=parameters.key),
                       self._model_path)

    def _device_inputs(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        assert self.boundary is not None
        arrays = []
        for array, layer in zip(check_inputs(inputs, self.boundary.inputs), self._in_layers, strict=True):
            data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
            if layer.signed:
                data = data ^ np.uint8(0x80)  # the device's signed convention (same flip as outputs)
            arrays.append(data)
        return arrays

    def run(self, inputs: Sequence[np.ndarray], parameters: Any = None) -> dict[str, np.ndarray]:
        """One inference; ``parameters`` (a ``reparam.ParameterSet``) selects the blobs to run with."""
        from libredgetpu_ros.formats.layout import fix_int8_sign, relayout_output

        if self._package is None or self.boundary is None:
            raise BackendError("EdgeTpuBackend.run called before load()")
        start = time.perf_counter()
        arrays = self._device_inputs(inputs)  # bad input is refused here, before it reaches the device
        if parameters is None or parameters.version == 0:
            package = self._package
            raw = self._call(lambda dev: dev.run(package, arrays), self._model_path)
        else:
            blob = parameters.blob("pc")
            package = self._package_for(parameters)
            raw = self._call(lambda dev: dev.run(package, arrays,
                                                 parameters=None if blob is None else memoryview(blob),
                                                 cache_key=None if blob is None else parameters.key),
                             self._model_path)
        self.last_latency_ms = (time.perf_counter() - start) * 1e3
        runnable = self._package.runnable
        by_name = {layer.name: i for i, layer in enumerate(runnable.output_layers)}
        outputs: dict[str, np.ndarray] = {}
        for spec, layer in zip(self.boundary.outputs, self._out_layers, strict=True):
            dense = relayout_output(raw[by_name[layer.name]], layer)
            values = fix_int8_sign(dense) if spec.dtype == np.int8 else dense
            outputs[spec.name] = values.reshape(spec.shape).astype(spec.dtype, copy=False)
        return outputs

    @property
    def device(self) -> Any:
        """What further segments share (None before ``load``): the ``DeviceBroker``, or the borrowed
        ``EdgeTpuDevice``."""
        return self._broker if self._stream is not None else self._device

    def shared_status(self) -> dict[str, Any]:
        """This backend's stream on the shared device (served, superseded, p50/p99, faults) and the
        device's users, faults and reopens; empty for a borrowed device."""
        stream = self._stream  # close() may run meanwhile (diagnostics thread)
        return {} if stream is None else stream.status()

    def describe(self) -> dict[str, Any]:
        device = self._device if self._stream is None else self._broker.device
        return {
            "backend": self.name,
            "choice": self.choice,
            "fallback": self.fallback,
            "device": None if device is None else device.bus_path,
            "speed": None if device is None else device.transport.speed,
            "model": None if self._model_path is None else str(self._model_path),
            "cpu_model": None if self._cpu_model_path is None else str(self._cpu_model_path),
            "parameter_uploads": None if device is None else device.uploads,
            "boundary": None if self.boundary is None else self.boundary.to_dict(),
        }

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
            broker, self._broker = self._broker, None
            broker.release()
        device, self._device = self._device, None
        if device is not None and self._owns_device:
            device.close()
