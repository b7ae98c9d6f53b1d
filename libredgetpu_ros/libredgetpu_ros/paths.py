"""Opening a file a user names (CLI argument, service request, parameter): a regular file within a budget.

A path from outside may name a FIFO (``open`` blocks until a writer comes: a node's executor then hangs, its
services and lifecycle unanswered), a device (``/dev/zero``: endless bytes; ``/dev/tty``: blocks), a socket,
a folder or a symlink to any of those. :func:`open_regular` opens without blocking (``O_NONBLOCK``), checks
what it opened (``fstat``: the file itself, so a swap after a check cannot slip through) is a regular file
of at most ``max_bytes``, and only then hands it out (blocking mode restored). :func:`check_regular` is the
same check for a library that opens the path itself (rosbags, sqlite, zipfile); :func:`file_kind` says what
is at a path without raising (doctor's reports, "is the cached file a plain file?").

Errors are ``error`` (an ``InputError`` subclass, or another of our errors, the caller chooses) naming what
and where, the path cut.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from libredgetpu_ros.errors import InputError, LibrEdgeTpuError, clip


def mode_kind(mode: int) -> str | None:
    """None for a regular file's ``st_mode``, else what it is: "a folder", "a FIFO", "a device", "a socket",
    "a symbolic link" (from ``lstat``) or "not a regular file"."""
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def file_kind(path: str | Path, *, follow: bool = True) -> str | None:
    """None when ``path`` is a regular file, else what is there: "missing", "unreadable (<reason>)" or a
    :func:`mode_kind`; nothing is opened. ``follow=False``: a symbolic link is "a symbolic link", whatever
    it points at."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    except ValueError:  # a NUL byte
        return "not a valid path"
    return mode_kind(st.st_mode)


def _checked(st: os.stat_result, path: str | Path, what: str, max_bytes: int | None,
             error: type[LibrEdgeTpuError]) -> int:
    kind = mode_kind(st.st_mode)
    if kind is not None:
        raise error(f"{what} {clip(str(path))} is {kind}, not a regular file")
    if max_bytes is not None and st.st_size > max_bytes:
        raise error(f"{what} {clip(str(path))}: {st.st_size} bytes is larger than the {max_bytes} accepted")
    return st.st_size


def _refusal(path: str | Path, what: str, exc: BaseException) -> str:
    """Why ``path`` could not be opened or stat'ed (never a second look at the path: that may fail too)."""
    shown = clip(str(path).replace("\0", "\\0"))
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return f"{what} {shown} does not exist"
    if isinstance(exc, ValueError):  # a NUL byte
        return f"{what} {shown} is not a valid path"
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else clip(exc)
    return f"{what} {shown} cannot be opened: {reason}"


def check_regular(path: str | Path, what: str, max_bytes: int | None = None,
                  error: type[LibrEdgeTpuError] = InputError) -> int:
    """The size of ``path`` (symlinks followed) if it is a regular file of at most ``max_bytes``; else
    ``error``. For libraries that open the path themselves: nothing is opened here."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:
        raise error(_refusal(path, what, exc)) from None
    return _checked(st, path, what, max_bytes, error)


def open_regular(path: str | Path, what: str, max_bytes: int | None = None,
                 error: type[LibrEdgeTpuError] = InputError, *, follow: bool = True) -> BinaryIO:
    """``path`` opened for binary reading if it is a regular file of at most ``max_bytes`` (checked on the
    opened file); else ``error``. Never blocks on a FIFO or a device. ``follow=False``: a symbolic link is
    refused (``O_NOFOLLOW``), not read through."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:
        if isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
            if follow:
                check_regular(path, what, max_bytes, error)  # a socket (ENXIO): named by its kind
            else:  # a link (ELOOP), a socket: named by what is there
                kind = file_kind(path, follow=False)
                if kind is not None and kind != "missing" and not kind.startswith("unreadable"):
                    raise error(f"{what} {clip(str(path))} is {kind}, not a regular file") from None
        raise error(_refusal(path, what, exc)) from None
    try:
        _checked(os.fstat(fd), path, what, max_bytes, error)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, what: str, max_bytes: int, error: type[InputError] = InputError) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (:func:`open_regular`); a file that grew past
    the budget while read (or a /proc-like file reporting size 0) is refused too."""
    with open_regular(path, what, max_bytes, error) as handle:
        try:
            # The size it has now (+1 to see growth), not the budget: read(n) allocates n bytes up front.
            data = handle.read(os.fstat(handle.fileno()).st_size + 1)
            while len(data) <= max_bytes:  # grew, or a /proc-like file reporting size 0: 1 MiB at a time
                more = handle.read(min(1 << 20, max_bytes + 1 - len(data)))
                if not more:
                    break
                data += more
        except OSError as exc:
            raise error(f"{what} {clip(str(path))}: cannot read: {clip(exc)}") from None
    if len(data) > max_bytes:
        raise error(f"{what} {clip(str(path))}: larger than the {max_bytes} bytes accepted")
    return data


def walk_files(folder: str | Path, what: str, *, max_depth: int = 32, max_entries: int = 100_000,
               error: type[InputError] = InputError) -> list[Path]:
    """Every file under ``folder`` (sub-folders included, sorted), without recursion: ``Path.rglob`` /
    ``glob("**")`` recurse in Python 3.11, so a deep enough tree was a RecursionError. Links to folders are
    not followed (no cycles); sub-folders that cannot be listed (``/proc``'s) are skipped. A tree deeper than
    ``max_depth`` or holding more than ``max_entries`` entries is ``error`` naming the folder
    (``LIBREDGETPU_ROS_TEMPLATES=/proc`` ends there, bounded)."""
    root = Path(folder)
    try:
        with os.scandir(root):
            pass
    except (OSError, ValueError) as exc:
        raise error(_refusal(root, what, exc)) from None
    found: list[Path] = []
    stack: list[tuple[Path, int]] = [(root, 0)]
    seen = 0
    while stack:
        current, depth = stack.pop()
        try:
            with os.scandir(current) as entries:
                listed = list(entries)
        except OSError:
            continue
        seen += len(listed)
        if seen > max_entries:
            raise error(f"{what} {clip(str(root))} holds more than {max_entries} entries; name a smaller "
                        f"folder")
        for entry in listed:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth + 1 > max_depth:
                        raise error(f"{what} {clip(str(root))} is more than {max_depth} folders deep "
                                    f"(at {clip(entry.path)})")
                    stack.append((Path(entry.path), depth + 1))
                elif entry.is_file():
                    found.append(Path(entry.path))
            except OSError:
                continue
    return sorted(found)
