"""USB transports: the only code that touches libusb (``UsbTransport``) and a recording test double.

A ``Transport`` moves bytes; it knows nothing about registers or models. Every failure surfaces as a typed
``DeviceError`` so the layers above never see libusb exceptions:

- timeout -> ``DeviceTimeoutError``
- device gone, I/O error, stalled endpoint, overflow -> ``DeviceLostError``
- access denied -> ``DevicePermissionError`` (names the udev rule)
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from libredgetpu_ros.errors import (
    DeviceError,
    DeviceLostError,
    DevicePermissionError,
    DeviceTimeoutError,
)

UDEV_RULE_FILE = "99-edgetpu-accelerator.rules"
UDEV_INSTALL_HINT = (
    f"install the udev rule shipped as libredgetpu_ros/config/{UDEV_RULE_FILE}: "
    f"sudo cp {UDEV_RULE_FILE} /etc/udev/rules.d/ && sudo udevadm control --reload-rules "
    "&& sudo udevadm trigger, add yourself to the plugdev group, then replug the accelerator"
)

DEFAULT_TIMEOUT_MS = 6000  # libedgetpu's --usb_timeout_millis default


@runtime_checkable
class Transport(Protocol):
    """What the chip driver and executor need from a USB connection."""

    bus_path: str
    speed: str

    def control_write(
        self,
        request_type: int,
        request: int,
        value: int,
        index: int,
        data: bytes,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None: ...

    def control_read(
        self,
        request_type: int,
        request: int,
        value: int,
        index: int,
        length: int,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> bytes: ...

    def bulk_write(
        self, endpoint: int, data: bytes | memoryview, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> None: ...

    def bulk_read(self, endpoint: int, size: int, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> bytes: ...

    def interrupt_read(self, endpoint: int, size: int, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> bytes: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


# --- libusb1 ------------------------------------------------------------


def import_usb1() -> Any:
    """Import the libusb1 binding lazily; a missing module or shared library becomes a DeviceError."""
    try:
        import usb1
    except ImportError as exc:  # the wheel is missing
        raise DeviceError(
            f"the 'libusb1' Python package is not installed ({exc}); pip install libusb1"
        ) from exc
    return usb1


def usb_context() -> Any:
    """An opened libusb context; a missing libusb-1.0 shared library becomes a DeviceError."""
    usb1 = import_usb1()
    context = usb1.USBContext()
    try:
        context.open()  # the shared library is loaded here, not at import
    except OSError as exc:
        raise DeviceError(
            f"libusb-1.0 cannot be loaded ({exc}); install it: sudo apt install libusb-1.0-0"
        ) from exc
    except usb1.USBError as exc:
        raise DeviceError(f"libusb cannot be initialised: {exc}") from exc
    return context


def translate_usb_error(exc: Exception, what: str, bus_path: str) -> DeviceError:
    """Map a usb1 exception to our typed errors."""
    usb1 = import_usb1()
    where = f"{what} on Edge TPU {bus_path}"
    if isinstance(exc, usb1.USBErrorTimeout):
        return DeviceTimeoutError(f"{where} timed out")
    if isinstance(exc, usb1.USBErrorAccess):
        return DevicePermissionError(f"{where}: permission denied; {UDEV_INSTALL_HINT}")
    if isinstance(exc, usb1.USBErrorPipe):
        return DeviceLostError(f"{where}: endpoint stalled; the accelerator stopped answering")
    if isinstance(exc, usb1.USBErrorNoDevice | usb1.USBErrorNotFound):
        return DeviceLostError(f"{where}: the accelerator disappeared from the bus")
    return DeviceLostError(f"{where} failed: {exc}")


class UsbTransport:
    """A claimed ML interface of one accelerator, on libusb1 (synchronous transfers)."""

    def __init__(
        self, context: Any, handle: Any, bus_path: str, speed: str, owns_context: bool = False
    ) -> None:
        self._context = context if owns_context else None
        self._handle = handle
        self.bus_path = bus_path
        self.speed = speed

    @classmethod
    def open(
        cls,
        context: Any,
        device: Any,
        bus_path: str,
        speed: str,
        interface: int = 0,
        owns_context: bool = False,
    ) -> UsbTransport:
        usb1 = import_usb1()
        try:
            handle = device.open()
        except usb1.USBError as exc:
            raise translate_usb_error(exc, "open", bus_path) from exc
        try:
            if handle.kernelDriverActive(interface):
                handle.detachKernelDriver(interface)
        except usb1.USBError:
            pass  # not supported on every platform; claiming below reports real problems
        try:
            handle.claimInterface(interface)
        except usb1.USBError as exc:
            handle.close()
            raise translate_usb_error(exc, "claim interface", bus_path) from exc
        return cls(context, handle, bus_path, speed, owns_context)

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        if self._handle is None:
            raise DeviceLostError(f"{what} on Edge TPU {self.bus_path}: transport is closed")
        usb1 = import_usb1()
        try:
            return fn()
        except usb1.USBError as exc:
            raise translate_usb_error(exc, what, self.bus_path) from exc
        except OSError as exc:  # ctypes / file-descriptor level failures below libusb
            raise DeviceLostError(f"{what} on Edge TPU {self.bus_path} failed: {exc}") from exc

    def control_write(
        self,
        request_type: int,
        request: int,
        value: int,
        index: int,
        data: bytes,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self._call(
            "control write",
            lambda: self._handle.controlWrite(request_type, request, value, index, bytes(data), timeout_ms),
        )

    def control_read(
        self,
        request_type: int,
        request: int,
        value: int,
        index: int,
        length: int,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> bytes:
        return bytes(
            self._call(
                "control read",
                lambda: self._handle.controlRead(request_type, request, value, index, length, timeout_ms),
            )
        )

    def bulk_write(
        self, endpoint: int, data: bytes | memoryview, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> None:
        payload = bytes(data)
        sent = self._call("bulk write", lambda: self._handle.bulkWrite(endpoint, payload, timeout_ms))
        if sent != len(payload):
            raise DeviceLostError(
                f"bulk write on Edge TPU {self.bus_path}: {sent} of {len(payload)} bytes sent"
            )

    def bulk_read(self, endpoint: int, size: int, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> bytes:
        return bytes(self._call("bulk read", lambda: self._handle.bulkRead(endpoint, size, timeout_ms)))

    def interrupt_read(self, endpoint: int, size: int, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> bytes:
        return bytes(
            self._call("interrupt read", lambda: self._handle.interruptRead(endpoint, size, timeout_ms))
        )

    def reset(self) -> None:
        """USB port reset; the device re-enumerates, so the handle is dead afterwards."""
        usb1 = import_usb1()
        if self._handle is None:
            return
        # an error is expected: the device leaves the bus while resetting (edgetpuxray: "okay exception")
        with contextlib.suppress(usb1.USBError):
            self._handle.resetDevice()
        self.close()

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        usb1 = import_usb1()
        with contextlib.suppress(usb1.USBError):  # already gone
            handle.releaseInterface(0)
        with contextlib.suppress(usb1.USBError):
            handle.close()
        context, self._context = self._context, None
        if context is not None:
            context.close()


# --- Recording double ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Call:
    """One transfer seen by ``RecordingTransport``. ``data`` is what was written (None for reads)."""

    kind: str  # "control_write" | "control_read" | "bulk_write" | "bulk_read" | "interrupt_read" | "reset"
    endpoint: int = 0
    request_type: int = 0
    request: int = 0
    value: int = 0
    index: int = 0
    length: int = 0
    data: bytes | None = None


Responder = Callable[[Call], bytes | None]


def _zeros(call: Call) -> bytes | None:
    """Default responder: reads return zeros, writes succeed."""
    return bytes(call.length) if call.data is None else None


class RecordingTransport:
    """TEST DOUBLE, not a device: records every call and answers reads from a scripted responder.

    ``responder(call)`` returns the bytes of a read (or None for writes), or raises a ``DeviceError`` to
    inject a fault. Used by the tests and by ``libredgetpu-ros plan`` (a dry run); ``list_devices()`` never
    lists it.
    """

    def __init__(
        self,
        responder: Responder | None = None,
        bus_path: str = "recording",
        speed: str = "super",
        keep_payloads: bool = True,
    ) -> None:
        self.responder: Responder = responder or _zeros
        self.calls: list[Call] = []
        self.bus_path = bus_path
        self.speed = speed
        self.keep_payloads = keep_payloads
        self.closed = False

    def _do(self, call: Call) -> bytes | None:
        if self.closed:
            raise DeviceLostError(f"{call.kind} on {self.bus_path}: transport is closed")
        self.calls.append(call)
        return self.responder(call)

    def control_write(
        self,
        request_type: int,
        request: int,
        value: int,
        index: int,
        data: bytes,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self._do(Call("control_write", 0, request_type, request, value, index, len(data), bytes(data)))

    def control_read(
        self,
        request_type: int,
        request: int,
        value: int,
        index: int,
        length: int,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> bytes:
        return bytes(self._do(Call("control_read", 0, request_type, request, value, index, length)) or b"")

    def bulk_write(
        self, endpoint: int, data: bytes | memoryview, timeout_ms: int = DEFAULT_TIMEOUT_MS
    ) -> None:
        size = len(data) if isinstance(data, bytes) else memoryview(data).nbytes
        payload = bytes(data) if self.keep_payloads or size <= 8 else b""
        self._do(Call("bulk_write", endpoint, length=size, data=payload))

    def bulk_read(self, endpoint: int, size: int, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> bytes:
        return bytes(self._do(Call("bulk_read", endpoint, length=size)) or b"")

    def interrupt_read(self, endpoint: int, size: int, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> bytes:
        return bytes(self._do(Call("interrupt_read", endpoint, length=size)) or b"")

    def reset(self) -> None:
        self._do(Call("reset"))
        self.closed = True

    def close(self) -> None:
        self.closed = True
