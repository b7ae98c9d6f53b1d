"""Choosing the accelerator when several are attached: the ``device`` selector (index, ``usb:<bus path>``,
auto = the first one no other process holds), one broker per physical device, a selector that matches nothing
failing even for ``backend: auto`` (naming it, listing what is attached), and a camera node's
``device_share_hz`` reaching the broker as its stream's weight.

Three accelerators are enumerated by a scripted libusb device list (the same double as ``devices``' tests);
opening one runs the real driver (selection, lock, reset, re-enumeration, chip init) over the recording
transport with a scripted accelerator behind it (``edgetpu/simulated.py``). None of this is real hardware.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from libredgetpu_ros.edgetpu import broker as brokers
from libredgetpu_ros.edgetpu import device as device_module
from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.simulated import simulated_transport
from libredgetpu_ros.errors import ConfigError, DeviceNotFoundError

from ..cli.test_devices_plan_cli import _ListedContext, _ListedUsbDevice
from .test_broker import MNV1, Gate

BUS_PATHS = ("91-1", "91-2", "91-3.4")


class _ScriptedUsb:
    """``UsbTransport`` for the listed devices: a recording transport over a scripted accelerator."""

    @staticmethod
    def open(context, device, bus_path, speed, interface=0, owns_context=False):
        return simulated_transport(bus_path)


@pytest.fixture
def three(monkeypatch):
    usb1 = pytest.importorskip("usb1")
    listed = [_ListedUsbDevice(r.APP_VENDOR_ID, r.APP_PRODUCT_ID, 91, tuple(int(p) for p in ports.split(".")),
                               usb1.SPEED_SUPER)
              for ports in (path.split("-")[1] for path in BUS_PATHS)]
    monkeypatch.setattr(device_module, "usb_context", lambda: _ListedContext(listed))
    monkeypatch.setattr(device_module, "UsbTransport", _ScriptedUsb)
    yield
    assert not set(BUS_PATHS) & set(brokers.brokers())  # every test released what it opened


def test_selector_syntax() -> None:
    parse = device_module.parse_selector
    assert parse(None) is None and parse("") is None and parse("  ") is None
    assert parse("0") == 0 and parse(2) == 2 and parse("12") == 12
    assert parse("usb:1-2.3") == "1-2.3" and parse("1-2") == "1-2" and parse("usb:3-1") == "3-1"
    for bad in ("front", "usb:", "usb:1-", "usb:a-b", "-1", "1-2x"):
        with pytest.raises(ConfigError, match=r"neither '' .*an index .*usb:1-2\.3"):
            parse(bad)
    with pytest.raises(ConfigError, match=">= 0"):
        parse(-1)


def test_one_broker_per_physical_device(three) -> None:
    by_path = brokers.open_shared("usb:91-2")
    by_index = brokers.open_shared("1")
    first = brokers.open_shared(0)
    try:
        assert by_path is by_index and by_path._refs == 2  # the same accelerator, named two ways
        assert (by_path.key, first.key) == ("91-2", "91-1")
        assert by_path.device.bus_path == "91-2" and first.device.bus_path == "91-1"
        assert by_path.device is not first.device
    finally:
        for broker in (by_path, by_index, first):
            broker.release()


def test_a_device_that_is_not_attached_fails_even_for_auto(three, fixture_path) -> None:
    from libredgetpu_ros.backends import open_backend

    attached = r"0=usb:91-1 \(running\), 1=usb:91-2 \(running\), 2=usb:91-3.4 \(running\)"
    for kind in ("auto", "edgetpu"):
        for missing in ("3", "usb:9-9"):
            with pytest.raises(DeviceNotFoundError, match=rf"device '{missing}'; attached: {attached}"):
                open_backend(kind, fixture_path(MNV1), device=missing)
    for kind in ("auto", "cpu", "edgetpu"):  # a malformed selector is a config error whatever the backend
        with pytest.raises(ConfigError, match="'front'"):
            open_backend(kind, fixture_path(MNV1), device="front")
    backend = open_backend("auto", fixture_path(MNV1), device="usb:91-3.4")
    try:
        assert backend.name == "edgetpu" and not backend.fallback
        assert backend.describe()["device"] == "91-3.4"
    finally:
        backend.close()


def test_auto_passes_over_a_device_another_process_holds(three) -> None:
    holder = textwrap.dedent("""
        import sys
        from libredgetpu_ros.edgetpu.locks import DeviceLock
        lock = DeviceLock("91-1").acquire()
        print("held", flush=True)
        sys.stdin.read()
        lock.release()
    """)
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        auto = brokers.open_shared(None)
        again = brokers.open_shared(None)  # one this process has open is shared, not a third one taken
        try:
            assert auto.key == "91-2" and again is auto
        finally:
            auto.release()
            again.release()
    finally:
        proc.stdin.close()
        proc.wait(10)


def test_device_share_hz_of_two_camera_nodes_weighs_their_turns(three, fixture_path) -> None:
    """Two perception nodes' parameters (device "1", device_share_hz 30 and 15) through the node's own
    ``pipeline_config``: both pipelines on accelerator 91-2, served 2:1 while both always wait."""
    from libredgetpu_ros.perception.pipeline import PerceptionPipeline
    from libredgetpu_ros.ros.perception.params import PARAMS, PerceptionParams, pipeline_config

    def node_params(share: float) -> PerceptionParams:
        values = {**PARAMS.defaults(), "model": str(fixture_path(MNV1)), "device": "1",
                  "device_share_hz": share}
        return PerceptionParams(**values)

    fast = PerceptionPipeline.from_config(pipeline_config(node_params(30.0)))
    slow = PerceptionPipeline.from_config(pipeline_config(node_params(15.0)))
    try:
        streams = [p._segments[0].backend._stream for p in (fast, slow)]
        broker = streams[0].broker
        assert streams[1].broker is broker and broker.key == "91-2"
        assert [s.weight for s in streams] == [30.0, 15.0]
        gate, order, done = Gate(), [], threading.Event()
        blocker = broker.stream("blocker")
        blocker.submit(gate)
        assert gate.entered.wait(10)

        def keep(stream, label):  # each served request resubmits itself: the stream always has one waiting
            def job(dev):
                order.append(label)
                if len(order) >= 90:
                    done.set()
                elif not done.is_set():
                    stream.submit(job)
            return job

        for stream, label in zip(streams, ("fast", "slow"), strict=True):
            stream.submit(keep(stream, label))
        gate.release.set()
        assert done.wait(10)
        assert order.count("fast") / order.count("slow") == pytest.approx(2.0, abs=0.15)
        blocker.close()
        image = np.zeros((128, 128, 3), np.uint8)  # and the pipelines still run on it
        assert fast._segments[0].backend.run([image]) and slow._segments[0].backend.run([image])
    finally:
        fast.close()
        slow.close()
