"""One owner per accelerator: a lock within the process and an flock between processes.

The lock file holds its owner, ``<pid> <name>`` (the name: :func:`set_holder_name`, a node or a command,
else the process's command line), so a second process's open fails naming who holds the device, and
``doctor`` lists the holders (:func:`holders`). Within a process the device is shared through
``edgetpu/broker.py`` instead of being opened twice.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import tempfile
import threading
from pathlib import Path

from libredgetpu_ros.errors import DeviceError

_process_lock = threading.Lock()
_held: set[str] = set()
_holder_name = ""
_SUFFIX = ".lock"
_MAX_HOLDER_BYTES = 256


def lock_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"libredgetpu-ros-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def set_holder_name(name: str) -> None:
    """What the lock files of this process name as the holder (e.g. "perception (bringup)")."""
    global _holder_name
    _holder_name = " ".join(name.split())[:128]


def _holder_text() -> str:
    name = _holder_name or " ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv[:3]))
    return f"{os.getpid()} {name or 'python'}"


def _describe_holder(text: str) -> str:
    pid, _, name = text.strip().partition(" ")
    if not pid:
        return "an unknown process"
    return f"pid {pid} ({name})" if name else f"pid {pid}"


def lock_path(bus_path: str) -> Path:
    return lock_dir() / (re.sub(r"[^A-Za-z0-9_.-]", "_", bus_path) + _SUFFIX)


def _holder_of(path: Path) -> str | None:
    """What the lock file ``path`` says of its holder when some process holds it right now (a shared flock
    probe that fails), else None: no file, or nobody holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # no lock file: nobody ever held it
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, _MAX_HOLDER_BYTES, 0).decode(errors="replace")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def held_elsewhere(bus_path: str) -> bool:
    """True when another process holds the device's lock right now (auto device selection passes over it)."""
    with _process_lock:
        if bus_path in _held:
            return False
    return _holder_of(lock_path(bus_path)) is not None


class DeviceLock:
    """Held while a device is open; ``release`` is idempotent."""

    def __init__(self, bus_path: str) -> None:
        self.bus_path = bus_path
        self.path = lock_path(bus_path)
        self._fd: int | None = None

    def acquire(self) -> DeviceLock:
        with _process_lock:
            if self.bus_path in _held:
                raise DeviceError(f"Edge TPU {self.bus_path} is already open in this process; close it first "
                                  f"(or share it: edgetpu/broker.py)")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, _MAX_HOLDER_BYTES, 0).decode(errors="replace")
                os.close(fd)
                raise DeviceError(
                    f"Edge TPU {self.bus_path} is in use by another process: {_describe_holder(owner)} holds "
                    f"it (lock {self.path}); stop it, or run every camera node in that one process "
                    f"(bringup), which shares the device"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{_holder_text()}\n".encode()[:_MAX_HOLDER_BYTES], 0)
            self._fd = fd
            _held.add(self.bus_path)
        return self

    def release(self) -> None:
        with _process_lock:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            _held.discard(self.bus_path)
            os.ftruncate(fd, 0)  # a stale file names nobody
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None


def holders(directory: Path | None = None) -> dict[str, str]:
    """Lock name (the bus path, "/" and such replaced) -> "pid N (name)" of every device held right now by
    some process (this one included); a lock file nobody holds is skipped."""
    found: dict[str, str] = {}
    folder = directory or lock_dir()
    for path in sorted(folder.glob(f"*{_SUFFIX}")):
        text = _holder_of(path)
        if text is not None:
            found[path.name[: -len(_SUFFIX)]] = _describe_holder(text)
    return found
