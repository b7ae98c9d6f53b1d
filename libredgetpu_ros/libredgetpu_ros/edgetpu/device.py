"""Public API of the driver: discover accelerators, open one, cache parameters, run executables.

``EdgeTpuDevice.open()`` boots a bootloader-mode accelerator with the firmware, claims the ML interface, runs
libedgetpu's init sequence and holds the device lock until ``close()``. A transfer failure in the middle of
an inference closes the handle and releases the lock (the chip state is unknown afterwards), so a later
``open()`` starts clean.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.chip import ChipDriver
from libredgetpu_ros.edgetpu.executor import execute as execute_steps
from libredgetpu_ros.edgetpu.firmware import load_firmware, upload_firmware
from libredgetpu_ros.edgetpu.locks import DeviceLock, held_elsewhere
from libredgetpu_ros.edgetpu.transport import (
    UDEV_INSTALL_HINT,
    Transport,
    UsbTransport,
    import_usb1,
    usb_context,
)
from libredgetpu_ros.errors import (
    ConfigError,
    DeviceError,
    DeviceLostError,
    DeviceNotFoundError,
    ModelFormatError,
    WeightsError,
)

log = logging.getLogger(__name__)

REENUMERATION_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    bus_path: str  # "1-2.3": bus 1, ports 2 then 3
    index: int
    mode: str  # "running" | "bootloader"
    vendor_id: int
    product_id: int
    speed: str  # "low" | "full" | "high" | "super" | "super+" | "unknown"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["usb_id"] = f"{self.vendor_id:04x}:{self.product_id:04x}"
        return d


def _speed_name(usb1: Any, code: int) -> str:
    names = {
        getattr(usb1, "SPEED_LOW", -1): "low",
        getattr(usb1, "SPEED_FULL", -1): "full",
        getattr(usb1, "SPEED_HIGH", -1): "high",
        getattr(usb1, "SPEED_SUPER", -1): "super",
        getattr(usb1, "SPEED_SUPER_PLUS", -1): "super+",
    }
    return names.get(code, "unknown")


def _enumerate(context: Any) -> list[tuple[DeviceInfo, Any]]:
    usb1 = import_usb1()
    found = []
    for dev in context.getDeviceIterator(skip_on_error=True):
        ids = (dev.getVendorID(), dev.getProductID())
        if ids == (r.APP_VENDOR_ID, r.APP_PRODUCT_ID):
            mode = "running"
        elif ids == (r.DFU_VENDOR_ID, r.DFU_PRODUCT_ID):
            mode = "bootloader"
        else:
            continue
        ports = ".".join(str(p) for p in dev.getPortNumberList())
        bus_path = f"{dev.getBusNumber()}-{ports}" if ports else str(dev.getBusNumber())
        found.append(
            (DeviceInfo(bus_path, 0, mode, ids[0], ids[1], _speed_name(usb1, dev.getDeviceSpeed())), dev)
        )
    found.sort(key=lambda item: item[0].bus_path)
    return [(dataclasses.replace(info, index=i), dev) for i, (info, dev) in enumerate(found)]


def list_devices() -> list[DeviceInfo]:
    """Every attached accelerator, running or in bootloader mode, ordered by bus path."""
    context = usb_context()
    try:
        return [info for info, _ in _enumerate(context)]
    finally:
        context.close()


USB_PREFIX = "usb:"
_BUS_PATH = re.compile(r"\d+(-\d+(\.\d+)*)?")

Selector = int | str | None


def parse_selector(selector: Selector) -> Selector:
    """A device selector as the nodes' ``device`` parameter and the CLI's ``--device`` take it: None or ""
    (auto: the first free one), an index ("0", 0; in bus-path order, as ``libredgetpu-ros devices`` lists
    them) or a USB bus path ("usb:1-2.3", or "1-2.3" as the driver names it). Returns None, an int or a bus
    path; anything else is a ``ConfigError`` naming the value."""
    if selector is None or isinstance(selector, int):
        if isinstance(selector, int) and selector < 0:
            raise ConfigError(f"device index must be >= 0, got {selector}")
        return selector
    text = str(selector).strip()
    if not text:
        return None
    if text.isdigit():
        return int(text)
    path = text[len(USB_PREFIX):] if text.startswith(USB_PREFIX) else text
    if "-" in path and _BUS_PATH.fullmatch(path):
        return path
    raise ConfigError(f"device {selector!r} is neither '' (the first free), an index (0, 1, ...) nor a USB "
                      f"bus path (usb:1-2.3, as `libredgetpu-ros devices` lists them)")


def attached_text(found: Sequence[DeviceInfo]) -> str:
    """What is attached, for errors: "0=usb:1-2 (running), 1=usb:1-3 (bootloader)" or "none"."""
    return ", ".join(f"{i.index}={USB_PREFIX}{i.bus_path} ({i.mode})" for i in found) or "none"


def _select(found: list[tuple[DeviceInfo, Any]], selector: Selector,
            skip: Callable[[DeviceInfo], bool] | None = None) -> tuple[DeviceInfo, Any]:
    """The accelerator ``selector`` names (see :func:`parse_selector`); for auto (None), the first one
    ``skip`` does not reject (held by another process), else the first one."""
    wanted = parse_selector(selector)
    if not found:
        named = "" if wanted is None else f"device {selector!r}: "
        raise DeviceNotFoundError(
            f"{named}no Edge TPU accelerator found (looked for USB 18d1:9302 and 1a6e:089a); "
            "check the cable and `lsusb`"
        )
    if wanted is None:
        return next((item for item in found if skip is None or not skip(item[0])), found[0])
    if isinstance(wanted, int):
        if wanted < len(found):
            return found[wanted]
    else:
        for item in found:
            if item[0].bus_path == wanted:
                return item
    raise DeviceNotFoundError(f"no Edge TPU matches device {selector!r}; attached: "
                              f"{attached_text([info for info, _ in found])}")


def select_device(selector: Selector, skip: Callable[[DeviceInfo], bool] | None = None) -> DeviceInfo:
    """The attached accelerator ``selector`` names (``DeviceNotFoundError`` naming it and listing what is
    attached when none does; ``ConfigError`` for a malformed selector)."""
    return _select([(info, None) for info in list_devices()], selector, skip)[0]


def _wait_for_running(context: Any, bus_path: str, timeout_s: float) -> tuple[DeviceInfo, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for info, dev in _enumerate(context):
            if info.bus_path == bus_path and info.mode == "running":
                return info, dev
        time.sleep(0.2)
    raise DeviceNotFoundError(
        f"Edge TPU {bus_path} did not come back in application mode within "
        f"{timeout_s:.0f} s after a reset; replug it"
    )


class ParameterCache:
    """Which parameter blobs sit on the chip, following libedgetpu's rule: all executables compiled with one
    ``parameter_caching_token`` share the on-chip cache; loading a different token evicts them all."""

    def __init__(self) -> None:
        self.token: int | None = None
        self.loaded: dict[Hashable, Hashable] = {}  # executable slot -> key of the blob it holds

    def needs_upload(self, token: int, slot: Hashable, key: Hashable) -> bool:
        if token == 0:  # no token: nothing is shareable, only the very same blob may be reused
            return not (self.token == 0 and self.loaded == {slot: key})
        return token != self.token or self.loaded.get(slot) != key

    def begin_upload(self, token: int, slot: Hashable) -> None:
        """Forget what the upload is about to overwrite: the slot itself, or everything on a token switch."""
        if token != self.token or token == 0:
            self.loaded.clear()
        self.token = token
        self.loaded.pop(slot, None)

    def mark_loaded(self, token: int, slot: Hashable, key: Hashable) -> None:
        self.token = token
        self.loaded[slot] = key

    def invalidate(self) -> None:
        self.token = None
        self.loaded.clear()


def _digest(*parts: bytes | memoryview) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part)
    return h.digest()


class EdgeTpuDevice:
    """One opened accelerator. Thread-safe: one inference at a time."""

    def __init__(self, transport: Transport, lock: DeviceLock, performance: str = "high") -> None:
        self.transport = transport
        self.bus_path = transport.bus_path
        self.chip = ChipDriver(transport)
        self.cache = ParameterCache()
        self.performance = performance
        self._lock = lock
        self._io = threading.RLock()
        self._open = True
        self._identities: dict[int, tuple[Any, bytes, bytes]] = {}  # id(executable) -> (ref, slot, params)
        self.uploads = 0  # parameter uploads done (for logs and tests)

    # --- opening
    # ------------------------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        selector: int | str | None = None,
        firmware: Path | None = None,
        transport_factory: Callable[[], Transport] | None = None,
        performance: str = "high",
    ) -> EdgeTpuDevice:
        """Open an accelerator by index or bus path (``parse_selector``; default: the first one no other
        process holds) and initialise it.

        ``transport_factory`` replaces USB discovery (tests, dry runs): it returns an application-mode
        transport.
        """
        if transport_factory is not None:
            transport = transport_factory()
            return cls._start(transport, DeviceLock(transport.bus_path).acquire(), performance)
        context = usb_context()
        try:
            info, dev = _select(_enumerate(context), selector, lambda i: held_elsewhere(i.bus_path))
            lock = DeviceLock(info.bus_path).acquire()
            try:
                if info.mode == "bootloader":
                    image = load_firmware(firmware)  # a missing file fails before touching the device
                    log.info(
                        "Edge TPU %s is in bootloader mode: uploading %d bytes of firmware",
                        info.bus_path,
                        len(image),
                    )
                    dfu = UsbTransport.open(context, dev, info.bus_path, info.speed)
                    try:
                        upload_firmware(dfu, image)
                    finally:
                        dfu.close()
                else:
                    # Like libedgetpu: a port reset before use clears whatever a previous owner left running.
                    UsbTransport.open(context, dev, info.bus_path, info.speed).reset()
                info, dev = _wait_for_running(context, info.bus_path, REENUMERATION_TIMEOUT_S)
                transport = UsbTransport.open(context, dev, info.bus_path, info.speed, owns_context=True)
            except BaseException:
                lock.release()
                raise
        except BaseException:
            context.close()
            raise
        return cls._start(transport, lock, performance)

    @classmethod
    def _start(cls, transport: Transport, lock: DeviceLock, performance: str) -> EdgeTpuDevice:
        device = cls(transport, lock, performance)
        try:
            device.chip.initialize(performance)
        except BaseException:
            device._teardown()
            raise
        log.info(
            "Edge TPU %s ready (%s speed, e-fuse revision %s)",
            transport.bus_path,
            transport.speed,
            device.chip.efuse_revision,
        )
        return device

    # --- running
    # ------------------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if not self._open:
            raise DeviceLostError(f"Edge TPU {self.bus_path} is closed; open it again")

    def _guarded(self, fn: Callable[[], Any]) -> Any:
        """Run one transfer sequence; anything that interrupts it closes the device.

        Not only device errors: an ``OSError`` from the USB stack or a ``KeyboardInterrupt`` /
        ``SystemExit`` arriving between two transfers leaves the chip half-way through an executable, in a
        state no later call can continue from. Keeping the handle open would also keep the device lock, and
        every fresh ``open()`` would then be refused as "already open".
        """
        with self._io:
            self._check_open()
            try:
                return fn()
            except DeviceError:
                log.error("Edge TPU %s failed mid-operation; closing it", self.bus_path)
                self._teardown()
                raise
            except OSError as exc:
                log.error("Edge TPU %s: I/O error mid-operation (%s); closing it", self.bus_path, exc)
                self._teardown()
                raise DeviceLostError(f"Edge TPU {self.bus_path}: I/O error mid-operation: {exc}") from exc
            except BaseException:
                log.error("Edge TPU %s interrupted mid-operation; closing it", self.bus_path)
                self._teardown()
                raise

    def _identity(self, executable: Any) -> tuple[bytes, bytes]:
        entry = self._identities.get(id(executable))
        if entry is None or entry[0] is not executable:
            slot = _digest(*(bs.data for bs in executable.instruction_bitstreams))
            entry = (executable, slot, _digest(executable.parameters))
            if len(self._identities) > 64:
                self._identities.clear()
            self._identities[id(executable)] = entry
        return entry[1], entry[2]

    def load_parameters(
        self, executable: Any, parameters: bytes | memoryview | None = None, cache_key: Hashable | None = None
    ) -> bool:
        """Run a PARAMETER_CACHING executable unless its blob is already on the chip; True if uploaded.

        ``parameters`` replaces the executable's blob (same length: the instructions are unchanged), and then
        ``cache_key`` names that blob (MatMulEngine passes a new key for new weights under the same token).
        """
        expected = len(executable.parameters)
        if parameters is not None and memoryview(parameters).nbytes != expected:
            raise WeightsError(
                f"parameter blob has {memoryview(parameters).nbytes} bytes; executable "
                f"{executable.name!r} takes {expected}"
            )
        if parameters is not None and cache_key is None:
            cache_key = ("blob", _digest(parameters))
        token = int(executable.parameter_caching_token)
        slot, default_key = self._identity(executable)
        key = default_key if cache_key is None else ("override", cache_key)

        def upload() -> bool:
            if not self.cache.needs_upload(token, slot, key):
                return False
            self.cache.begin_upload(token, slot)
            execute_steps(self.transport, executable, (), parameters)
            self.cache.mark_loaded(token, slot, key)
            self.uploads += 1
            return True

        return bool(self._guarded(upload))

    def execute(self, executable: Any, inputs: Sequence[Any]) -> list[bytes]:
        """Run one executable; raw bytes of each output layer."""
        return self._guarded(lambda: execute_steps(self.transport, executable, inputs))

    def run(
        self,
        package: Any,
        inputs: Sequence[Any],
        parameters: bytes | memoryview | None = None,
        cache_key: Hashable | None = None,
    ) -> list[bytes]:
        """One inference: upload parameters unless cached, then EXECUTION_ONLY (or STAND_ALONE)."""
        pc = package.parameter_caching
        eo = package.execution_only
        with self._io:
            if pc is not None and eo is not None:
                self.load_parameters(pc, parameters, cache_key)
                return self.execute(eo, inputs)
            if package.stand_alone is None:
                raise ModelFormatError(
                    "DarwiNN package has no STAND_ALONE nor PARAMETER_CACHING + EXECUTION_ONLY executables"
                )
            self.cache.invalidate()  # streamed parameters may overwrite the cached ones on chip
            return self.execute(package.stand_alone, inputs)

    def invalidate_parameters(self) -> None:
        with self._io:
            self.cache.invalidate()

    # --- closing
    # ------------------------------------------------------------------------------------------------
    def _teardown(self) -> None:
        self._open = False
        self.cache.invalidate()
        try:
            self.transport.close()
        finally:
            self._lock.release()

    def close(self) -> None:
        """Halt the cores (best effort) and release the device."""
        with self._io:
            if not self._open:
                return
            try:
                self.chip.run_control(r.RUN_STATE_HALT)
            except DeviceError as exc:
                log.warning("Edge TPU %s: halting on close failed: %s", self.bus_path, exc)
            self._teardown()

    @property
    def is_open(self) -> bool:
        return self._open

    def __enter__(self) -> EdgeTpuDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["UDEV_INSTALL_HINT", "DeviceInfo", "EdgeTpuDevice", "ParameterCache", "list_devices",
           "parse_selector", "select_device"]
