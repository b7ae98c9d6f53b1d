"""Firmware for accelerators that enumerate as the bootloader (1a6e:089a): find it, upload it over DFU.

The upload follows libedgetpu's ``UsbDfuCommands::UpdateFirmware`` / ``ValidateFirmware`` with the block size
seen on the wire in geohot/edgetpuxray's log: DFU_DNLOAD blocks of 0x100 bytes, each followed by
DFU_GETSTATUS,
a final zero-length block, then DFU_UPLOAD reads until a short block and a byte compare, then a USB reset.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from libredgetpu_ros.edgetpu import registers as r
from libredgetpu_ros.edgetpu.transport import Transport
from libredgetpu_ros.errors import DeviceLostError, FirmwareNotFoundError, InputError

FIRMWARE_NAME = "apex_latest_single_ep.bin"
ENV_VAR = "LIBREDGETPU_FIRMWARE"
MAX_FIRMWARE_BYTES = 16 * 1024 * 1024
SOURCE_HINT = (
    f"get {FIRMWARE_NAME} from https://github.com/google-coral/libedgetpu "
    f"(driver/usb/{FIRMWARE_NAME}, Apache-2.0) and copy it into ~/.local/share/libredgetpu/ (or "
    f"/usr/local/share/libredgetpu/), or set {ENV_VAR}=PATH"
)
# Upper bound on upload-verify blocks: 16 MiB of firmware at 0x100 per block, far above the real ~11 KB.
MAX_UPLOAD_BLOCKS = 65536


def firmware_candidates(explicit: Path | None = None) -> list[Path]:
    """Where the firmware is looked for, in order."""
    if explicit is not None:
        return [Path(explicit)]
    paths = []
    if os.environ.get(ENV_VAR):
        paths.append(Path(os.environ[ENV_VAR]))
    data_home = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share"))
    paths += [
        data_home / "libredgetpu" / FIRMWARE_NAME,
        Path("/usr/local/share/libredgetpu") / FIRMWARE_NAME,
        Path("/usr/share/libredgetpu") / FIRMWARE_NAME,
    ]
    return paths


def find_firmware(explicit: Path | None = None) -> Path:
    """The firmware file, or FirmwareNotFoundError naming every place looked at and where to get it."""
    candidates = firmware_candidates(explicit)
    for path in candidates:
        if path.is_file():
            return path
    looked = ", ".join(str(p) for p in candidates)
    raise FirmwareNotFoundError(f"Edge TPU firmware not found (looked in: {looked}); {SOURCE_HINT}")


def load_firmware(explicit: Path | None = None) -> bytes:
    from libredgetpu_ros.paths import read_regular

    path = find_firmware(explicit)
    try:  # a regular file (the real one is ~10 KB): $LIBREDGETPU_FIRMWARE=/dev/zero never ended
        image = read_regular(path, "firmware file", MAX_FIRMWARE_BYTES)
    except InputError as exc:
        raise FirmwareNotFoundError(f"{exc}; {SOURCE_HINT}") from None
    if not image:
        raise FirmwareNotFoundError(f"firmware file {path} is empty; {SOURCE_HINT}")
    return image


def sha256(image: bytes) -> str:
    return hashlib.sha256(image).hexdigest()


def _status(transport: Transport) -> tuple[int, int]:
    raw = transport.control_read(r.DFU_IN, r.DFU_GETSTATUS, 0, 0, r.DFU_STATUS_SIZE)
    if len(raw) != r.DFU_STATUS_SIZE:
        raise DeviceLostError(f"DFU_GETSTATUS returned {len(raw)} bytes, expected {r.DFU_STATUS_SIZE}")
    return raw[0], raw[4]  # bStatus, bState


def upload_firmware(
    transport: Transport, image: bytes, block_size: int = r.DFU_BLOCK_SIZE, verify: bool = True
) -> None:
    """Download ``image`` into a bootloader-mode device, read it back, then reset it into application mode."""
    blocks = [image[i : i + block_size] for i in range(0, len(image), block_size)] + [b""]
    for number, block in enumerate(blocks):
        transport.control_write(r.DFU_OUT, r.DFU_DNLOAD, number & 0xFFFF, 0, block)
        status, state = _status(transport)
        expected = r.DFU_STATE_IDLE if not block else r.DFU_STATE_DNLOAD_IDLE
        if status != 0 or state != expected:
            raise DeviceLostError(
                f"firmware download failed at block {number}: DFU status {status}, "
                f"state {state} (expected state {expected})"
            )
    if verify:
        readback = bytearray()
        for number in range(MAX_UPLOAD_BLOCKS):
            chunk = transport.control_read(r.DFU_IN, r.DFU_UPLOAD, number & 0xFFFF, 0, block_size)
            readback += chunk
            if len(chunk) < block_size:
                break
        if bytes(readback[: len(image)]) != image:
            raise DeviceLostError(
                f"firmware verification failed: read back {len(readback)} bytes that differ "
                f"from the {len(image)}-byte image"
            )
    transport.reset()
