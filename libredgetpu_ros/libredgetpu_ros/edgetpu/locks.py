"""One owner per accelerator: a lock within the process and an flock between processes."""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
import threading
from pathlib import Path

from libredgetpu_ros.errors import DeviceError

_process_lock = threading.Lock()
_held: set[str] = set()


def lock_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"libredgetpu-ros-{os.getuid()}"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


class DeviceLock:
    """Held while a device is open; ``release`` is idempotent."""

    def __init__(self, bus_path: str) -> None:
        self.bus_path = bus_path
        self.path = lock_dir() / (re.sub(r"[^A-Za-z0-9_.-]", "_", bus_path) + ".lock")
        self._fd: int | None = None

    def acquire(self) -> DeviceLock:
        with _process_lock:
            if self.bus_path in _held:
                raise DeviceError(f"Edge TPU {self.bus_path} is already open in this process; close it first")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise DeviceError(
                    f"Edge TPU {self.bus_path} is in use by another process (pid {owner}, lock {self.path})"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self._fd = fd
            _held.add(self.bus_path)
        return self

    def release(self) -> None:
        with _process_lock:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            _held.discard(self.bus_path)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None
