"""``libredgetpu-ros devices`` and ``plan``: discovery over a scripted libusb enumeration; dry-run schedules.

The enumeration double stands in for libusb's device list only (ids, bus, ports, speed); it is never opened
as a device. Everything above it (mode detection, ordering, indices, selection, JSON) is the real code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from libredgetpu_ros.cli.main import main
from libredgetpu_ros.edgetpu import device as device_module
from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.errors import DeviceNotFoundError
from libredgetpu_ros.formats import load_model

from .._helpers import one_error_line

DEEPLAB = "deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite"
DENSE = "matmul/dense_256_edgetpu.tflite"


@dataclass
class _ListedUsbDevice:
    vendor: int
    product: int
    bus: int
    ports: tuple[int, ...]
    speed: int

    def getVendorID(self) -> int:
        return self.vendor

    def getProductID(self) -> int:
        return self.product

    def getBusNumber(self) -> int:
        return self.bus

    def getPortNumberList(self) -> list[int]:
        return list(self.ports)

    def getDeviceSpeed(self) -> int:
        return self.speed


class _ListedContext:
    def __init__(self, devices: list[_ListedUsbDevice]) -> None:
        self.devices = devices
        self.closed = False

    def getDeviceIterator(self, skip_on_error: bool = False):
        return iter(self.devices)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def attached(monkeypatch):
    """Two accelerators (one running on 2-1.4, one in bootloader mode on 1-3) and an unrelated keyboard."""
    usb1 = pytest.importorskip("usb1")
    listed = [
        _ListedUsbDevice(r.APP_VENDOR_ID, r.APP_PRODUCT_ID, 2, (1, 4), usb1.SPEED_SUPER),
        _ListedUsbDevice(0x046D, 0xC31C, 1, (2,), usb1.SPEED_LOW),
        _ListedUsbDevice(r.DFU_VENDOR_ID, r.DFU_PRODUCT_ID, 1, (3,), usb1.SPEED_HIGH),
    ]
    contexts: list[_ListedContext] = []

    def fake_context() -> _ListedContext:
        contexts.append(_ListedContext(listed))
        return contexts[-1]

    monkeypatch.setattr(device_module, "usb_context", fake_context)
    return contexts


def test_devices_json_lists_both_modes_ordered_by_bus_path(attached, capsys) -> None:
    assert main(["devices", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(d["index"], d["bus_path"], d["mode"], d["usb_id"], d["speed"]) for d in rows] == [
        (0, "1-3", "bootloader", "1a6e:089a", "high"),
        (1, "2-1.4", "running", "18d1:9302", "super"),
    ]
    assert attached and all(c.closed for c in attached)  # the libusb context is released


def test_devices_text_output(attached, capsys) -> None:
    assert main(["devices"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[0] 1-3  1a6e:089a  bootloader  high speed")
    assert "firmware is uploaded" in lines[0]
    assert lines[1] == "[1] 2-1.4  18d1:9302  running  super speed"


def test_select_by_index_and_bus_path(attached) -> None:
    found = device_module._enumerate(device_module.usb_context())
    assert device_module._select(found, None)[0].bus_path == "1-3"
    assert device_module._select(found, 1)[0].bus_path == "2-1.4"
    assert device_module._select(found, "1")[0].bus_path == "2-1.4"
    assert device_module._select(found, "2-1.4")[0].index == 1
    assert device_module._select(found, "usb:2-1.4")[0].index == 1
    listed = r"0=usb:1-3 \(bootloader\), 1=usb:2-1.4 \(running\)"
    with pytest.raises(DeviceNotFoundError, match=rf"'9-9'.*{listed}"):
        device_module._select(found, "9-9")
    with pytest.raises(DeviceNotFoundError, match=r"no Edge TPU matches device 5"):
        device_module._select(found, 5)
    with pytest.raises(DeviceNotFoundError, match="18d1:9302 and 1a6e:089a"):
        device_module._select([], None)


def test_no_devices(monkeypatch, capsys) -> None:
    monkeypatch.setattr(device_module, "usb_context", lambda: _ListedContext([]))
    assert main(["devices", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["devices"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("no Edge TPU accelerators found") and "libredgetpu-ros doctor" in out  # what next


def test_plan_json_follows_deeplab_dma_hints(fixture_path, capsys) -> None:
    path = fixture_path(DEEPLAB)
    assert main(["plan", "--json", str(path)]) == 0
    plan = json.loads(capsys.readouterr().out)
    (op,) = plan["operators"]
    caching, running = op["executables"]
    assert (caching["type"], running["type"]) == ("PARAMETER_CACHING", "EXECUTION_ONLY")
    assert caching["parameter_caching_token"] == running["parameter_caching_token"]

    package = load_model(path).darwinn(load_model(path).edgetpu_ops()[0])
    assert [s["size"] for s in caching["steps"] if s["source"] == "parameters"] == [
        len(package.parameter_caching.parameters)
    ]
    writes = [(s["source"], s["chunk"], s["offset"], s["size"], s["padded"])
              for s in running["steps"] if s["action"] == "write"]
    # Instruction chunk 0, the input in two overlapping pieces (the second zero-padded past the tensor end),
    # then instruction chunk 1: the interleaving the DMA hints prescribe.
    assert [w[0] for w in writes] == ["instructions", "input", "input", "instructions"]
    (_, _, off0, size0, pad0), (_, _, off1, size1, pad1) = writes[1], writes[2]
    assert off0 == 0 and off1 < off0 + size0 and pad0 == 0 and pad1 == 5
    assert [w[1] for w in writes if w[0] == "instructions"] == [0, 1]
    reads = [s for s in running["steps"] if s["action"] == "read"]
    assert [s["size"] for s in reads] == [33 * 33 * 256, 256]

    # The USB transfers the executor issued: every bulk-out header names the tag and length of its step.
    headers = [(t["tag"], t["length"]) for t in running["transfers"] if t["op"] == "header"]
    assert headers == [(0, writes[0][3]), (1, size0), (1, size1), (0, writes[3][3])]
    inbound = [t for t in running["transfers"] if t["op"] == "bulk_in" and t["endpoint"] == 0x81]
    assert inbound and all(t["requested"] == r.BULK_IN_CHUNK for t in inbound)


def test_plan_cached_skips_parameter_caching(fixture_path, capsys) -> None:
    assert main(["plan", "--json", "--cached", str(fixture_path(DENSE))]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["cached"] is True
    assert [e["type"] for e in plan["operators"][0]["executables"]] == ["EXECUTION_ONLY"]
    assert main(["plan", str(fixture_path(DENSE))]) == 0
    text = capsys.readouterr().out
    assert "cold start" in text and "PARAMETER_CACHING" in text and "EXECUTION_ONLY" in text


def test_plan_bad_input_exits_2(tmp_path, capsys) -> None:
    assert main(["plan", str(tmp_path / "missing_edgetpu.tflite")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["plan", str(tmp_path)]) == 2
    assert f"model file {tmp_path} is a folder, not a regular file" in capsys.readouterr().err
    junk = tmp_path / "junk_edgetpu.tflite"
    junk.write_bytes(b"\x10\x00\x00\x00TFL3" + b"\xff" * 40)
    one_error_line(main(["plan", str(junk)]), capsys.readouterr().err)


def test_plan_of_a_cpu_only_model_says_so(fixture_path, capsys) -> None:
    assert main(["plan", str(fixture_path("classify/mobilenet_v1_0.25_128_quant.tflite"))]) == 2
    assert "no edgetpu-custom-op" in capsys.readouterr().err
