"""Scripted device behaviour for ``RecordingTransport`` (tests and the ``plan`` dry run). Not a device.

``SimulatedAccelerator`` answers like an application-mode accelerator: a register file whose power-state
field follows the force-sleep requests, output bytes served from a queue in configurable (odd) chunk sizes,
and an end-of-executable event on 0x82. ``SimulatedBootloader`` answers DFU requests and keeps the image.
``Timed`` puts a timing model in front of a responder: bulk bytes cost time at the link's rate, each
executable's end-of-run event costs its compute time (the caller sleeps, as it waits on a real device).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import cycle

from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.registers import Reg
from libredgetpu_ros.edgetpu.transport import Call, RecordingTransport

# Register contents at power-up chosen so that libedgetpu's read-modify-write steps produce exactly the values
# geohot/edgetpuxray saw on a real device (scu_ctrl_0 0x000F0059, scu_ctrl_3 0x5085025C, scu_ctrl_2
# 0x00150000,
# omc0_d4 0x80000001, omc0_d8 0x80000000, rambist_ctrl_1 0x7F, scu_ctr_7 0x3F).
POWER_ON_REGISTERS: dict[int, int] = {
    Reg.scu_ctrl_0: 0x000F0059 | (1 << 8) | (1 << 11),  # both inactive PHY modes = 1 (reset default)
    Reg.scu_ctrl_2: 0x00150000,  # rg_gated_gcb = 1: hardware clock gated
    Reg.scu_ctrl_3: 0x0005005C,
    Reg.omc0_00: 0x0100089A,  # chip id 0x89A
    Reg.omc0_d4: 0x00000001,
    Reg.omc0_d8: 0x00000000,
    Reg.rambist_ctrl_1: 0x0070007F,  # BIST interrupts masked
    Reg.scu_ctr_7: 0x000C003F,  # boot-failure interrupts masked
}


class SimulatedAccelerator:
    """Responder of an application-mode accelerator."""

    def __init__(self, outputs: bytes = b"", chunk_sizes: Iterable[int] | None = None) -> None:
        self.registers: dict[int, int] = dict(POWER_ON_REGISTERS)
        self.output = bytearray(outputs)
        self._chunks: Iterator[int] | None = cycle(chunk_sizes) if chunk_sizes is not None else None
        self.events_served = 0

    def queue_output(self, data: bytes) -> None:
        self.output += data

    def _read_register(self, offset: int) -> int:
        value = self.registers.get(offset, 0)
        if offset == Reg.scu_ctrl_3:  # the power state follows the force-sleep request immediately
            state = 2 if r.field(value, *r.SCU3_RG_FORCE_SLEEP) == 3 else 0
            value = r.with_field(value, *r.SCU3_CUR_PWR_STATE, state)
        return value

    def __call__(self, call: Call) -> bytes | None:
        offset = (call.index << 16) | call.value
        if call.kind == "control_write" and call.request_type == r.VENDOR_OUT:
            self.registers[offset] = int.from_bytes(call.data or b"", "little")
            return None
        if call.kind == "control_read" and call.request_type == r.VENDOR_IN:
            value = self._read_register(offset)
            return struct.pack("<I" if call.length == 4 else "<Q", value & ((1 << (8 * call.length)) - 1))
        if call.kind == "bulk_read" and call.endpoint == r.EP_BULK_IN_OUTPUT:
            # A device never returns more than the host asked for (libusb would report an overflow).
            size = min(next(self._chunks), call.length) if self._chunks is not None else call.length
            data = bytes(self.output[:size])
            del self.output[:size]
            return data
        if call.kind == "bulk_read" and call.endpoint == r.EP_EVENT_IN:
            self.events_served += 1
            return struct.pack("<QIB3x", 0, 0, r.DescriptorTag.INTERRUPT0)
        return None if call.data is not None else bytes(call.length)


class SimulatedBootloader:
    """Responder of a bootloader-mode (DFU) accelerator: stores downloaded blocks, serves them back."""

    def __init__(self) -> None:
        self.image = bytearray()
        self.state = r.DFU_STATE_IDLE
        self.reset_called = False

    def __call__(self, call: Call) -> bytes | None:
        if call.kind == "control_write" and call.request == r.DFU_DNLOAD:
            self.image += call.data or b""
            self.state = r.DFU_STATE_DNLOAD_IDLE if call.data else r.DFU_STATE_IDLE
            return None
        if call.kind == "control_read" and call.request == r.DFU_GETSTATUS:
            return bytes([0, 0, 0, 0, self.state, 0])
        if call.kind == "control_read" and call.request == r.DFU_UPLOAD:
            start = call.value * call.length
            return bytes(self.image[start : start + call.length])
        if call.kind == "reset":
            self.reset_called = True
        return None


@dataclass(frozen=True)
class TimingModel:
    """How long a simulated transfer takes: ``bytes_per_s`` on bulk endpoints (USB 3 moves ~300 MB/s of
    payload in practice), ``per_call_s`` for any transfer, ``run_s`` of device compute per executable
    (charged when the host reads the end-of-executable event)."""

    bytes_per_s: float = 300e6
    per_call_s: float = 20e-6
    run_s: float = 0.005

    def cost(self, call: Call) -> float:
        seconds = self.per_call_s
        if call.kind in ("bulk_write", "bulk_read") and call.endpoint != r.EP_EVENT_IN:
            seconds += call.length / self.bytes_per_s
        if call.kind == "bulk_read" and call.endpoint == r.EP_EVENT_IN:
            seconds += self.run_s
        return seconds


class Timed:
    """A responder that takes the time ``model`` gives each call before answering like ``inner``."""

    def __init__(self, inner: Callable[[Call], bytes | None], model: TimingModel | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner, self.model, self._sleep = inner, model or TimingModel(), sleep
        self.busy_s = 0.0  # simulated device time so far
        self._owed = 0.0  # slept in >= 1 ms steps: the OS's sleep granularity would swamp tiny calls

    def __call__(self, call: Call) -> bytes | None:
        seconds = self.model.cost(call)
        self.busy_s += seconds
        self._owed += seconds
        if self._owed >= 1e-3 or call.endpoint == r.EP_EVENT_IN:
            owed, self._owed = self._owed, 0.0
            self._sleep(owed)
        return self.inner(call)


class ZerosAccelerator(SimulatedAccelerator):
    """An application-mode responder whose output reads are zeros of the asked length (any model runs)."""

    def __call__(self, call: Call) -> bytes | None:
        if call.kind == "bulk_read" and call.endpoint == r.EP_BULK_IN_OUTPUT:
            return bytes(call.length)
        return super().__call__(call)


def simulated_transport(bus_path: str = "simulated", timing: TimingModel | None = None) -> RecordingTransport:
    """A recording transport over a :class:`ZerosAccelerator`, timed by ``timing`` (None: instant)."""
    responder: Callable[[Call], bytes | None] = ZerosAccelerator()
    if timing is not None:
        responder = Timed(responder, timing)
    return RecordingTransport(responder, bus_path=bus_path, keep_payloads=False)
