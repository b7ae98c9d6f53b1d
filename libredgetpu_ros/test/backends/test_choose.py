"""One accelerator vocabulary: ``backends.choose`` is the only "auto" resolution, for the perception backends
(``open_backend``) and MatMul's runners (``MatMulEngine``) alike.

Each case sets up one device situation (the USB enumeration monkeypatched, or an accelerator simulated by
``edgetpu.simulated`` and shared through the process's broker) and asks both for "auto" on the same Dense
template: the runner kind, ``choice`` and ``fallback`` must be the same text. A second resolution of "auto"
anywhere (the engine deciding on its own) gives a different answer in at least one of them.
"""

from __future__ import annotations

from contextlib import closing

import numpy as np
import pytest
from libredgetpu_ros.backends import open_backend
from libredgetpu_ros.edgetpu import device as device_module
from libredgetpu_ros.edgetpu.device import DeviceInfo
from libredgetpu_ros.errors import DeviceNotFoundError
from libredgetpu_ros.matmul import MatMulEngine, load_template

SIZE = 256


@pytest.fixture(scope="module")
def template():
    return load_template(SIZE)


def _both(template, device=None) -> tuple[tuple[str, str, str], tuple[str, str, str]]:
    """(kind, choice, fallback) of open_backend("auto") and of MatMulEngine(backend="auto")."""
    with closing(open_backend("auto", template.compiled_path, template.uncompiled_path, device)) as backend:
        seen_backend = (backend.name, backend.choice, backend.fallback)
    with MatMulEngine(template, backend="auto", device=device) as engine:
        seen_engine = (engine.backend, engine.choice, engine.fallback)
    return seen_backend, seen_engine


def test_no_accelerator_attached_is_one_answer(template, monkeypatch):
    monkeypatch.setattr(device_module, "list_devices", lambda: [])
    backend, engine = _both(template)
    assert backend == engine
    assert engine == ("cpu", "auto: no Edge TPU attached (libredgetpu-ros devices)",
                      "auto: no Edge TPU attached (libredgetpu-ros devices)")


def test_an_accelerator_that_fails_to_open_is_one_answer(template, monkeypatch):
    """Listed but not openable (another process took it, unplugged meanwhile): both fall back to the CPU
    and say why; the engine used to raise instead."""
    ghost = DeviceInfo("9-9", 0, "running", 0x18D1, 0x9302, "super")
    monkeypatch.setattr(device_module, "list_devices", lambda: [ghost])
    monkeypatch.setattr(device_module, "_enumerate", lambda context: [])  # gone when opened
    monkeypatch.setattr(device_module, "usb_context", lambda: _NoContext())
    backend, engine = _both(template)
    assert backend == engine
    kind, choice, fallback = engine
    assert kind == "cpu" and choice == fallback
    assert choice.startswith("auto: the Edge TPU failed to open: device '9-9': no Edge TPU accelerator "
                             "found"), choice


def test_a_shared_accelerator_is_one_answer(template, monkeypatch):
    """An accelerator this process already opened (a broker) is shared by both, never a reason for the CPU,
    even when the USB enumeration sees nothing (the engine used to pick the CPU twin here)."""
    from libredgetpu_ros.edgetpu.broker import open_shared
    from libredgetpu_ros.edgetpu.simulated import simulated_transport

    monkeypatch.setattr(device_module, "list_devices", lambda: [])
    broker = open_shared(transport_factory=lambda: simulated_transport("test-choose-shared"))
    try:
        backend, engine = _both(template, device=broker)
    finally:
        broker.release()
    assert backend == engine == ("edgetpu", "auto: shared accelerator", "")


def test_a_pinned_device_that_is_missing_never_falls_back(template, monkeypatch):
    monkeypatch.setattr(device_module, "list_devices", lambda: [])
    with pytest.raises(DeviceNotFoundError, match="device '3'"):
        open_backend("auto", template.compiled_path, template.uncompiled_path, device="3")
    with pytest.raises(DeviceNotFoundError, match="device '3'"):  # the engine used to run on the CPU
        MatMulEngine(template, backend="auto", device="3")
    for kind in ("edgetpu",):  # asked for by name: the error, never the CPU
        with pytest.raises(DeviceNotFoundError):
            open_backend(kind, template.compiled_path, template.uncompiled_path)
        with pytest.raises(DeviceNotFoundError):
            MatMulEngine(template, backend=kind)


def test_two_engines_on_one_device_keep_their_own_weights(template):
    """Each engine's versions are cached on the device under its store's key: the second engine's version 1
    is uploaded, not mistaken for the first engine's version 1 (same template, same caching token)."""
    from libredgetpu_ros.edgetpu.broker import open_shared
    from libredgetpu_ros.edgetpu.simulated import simulated_transport

    broker = open_shared(transport_factory=lambda: simulated_transport("test-choose-two-engines"))
    scales = template.quant.weight_scales[:, None]
    rng = np.random.default_rng(1)
    try:
        with MatMulEngine(template, backend="edgetpu", device=broker) as first, \
                MatMulEngine(template, backend="edgetpu", device=broker) as second:
            device = broker.device
            first.set_weights(rng.uniform(-50, 50, (SIZE, SIZE)) * scales)
            before = device.uploads
            second.set_weights(rng.uniform(-50, 50, (SIZE, SIZE)) * scales)
            assert (first.version, second.version) == (1, 1)
            assert device.uploads == before + 1  # the second engine's own version 1
            first.matmul(np.zeros(SIZE))
            assert device.uploads == before + 2  # and the first engine's back before it runs
    finally:
        broker.release()


class _NoContext:
    """A libusb context that enumerates nothing (the listed accelerator is gone when opened)."""

    def close(self) -> None:
        pass
