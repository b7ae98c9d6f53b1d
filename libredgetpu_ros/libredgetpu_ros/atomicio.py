"""Every file this package writes goes through here: readers see the old file or the new one, never half.

The bytes go to a hidden temporary name in the SAME folder as the final name (so the rename cannot cross a
file system), are flushed and fsync'ed, and the temporary is renamed onto the final name with ``os.replace``
(atomic on POSIX); then the folder is fsync'ed so the rename itself survives a power cut. If anything fails or
interrupts the write before the rename (an exception, a full disk, Ctrl-C), the temporary is removed and the
old file is untouched. A ``kill -9`` cannot be cleaned up after, but it too leaves the final name alone: what
remains is a hidden ``.<name>.<random>.tmp`` beside it.

Several shapes, one mechanism:

- :func:`atomic_write_bytes` / :func:`atomic_write_text` for data already in memory;
- :func:`atomic_open`, a context manager yielding a binary (or text) file object, for writers that stream;
- :func:`atomic_path`, yielding a fresh path that does not exist yet, for libraries that insist on creating
  the file or folder themselves (bag writers); whatever they leave there replaces the final name;
- :func:`atomic_directory`, yielding an empty temporary folder beside the final one, renamed into place whole;
- :func:`commit_file` for a temporary the caller keeps across runs (a resumable ``.part`` download).

The final name is replaced, not written through: if it is a symlink, the link itself becomes the new file
(the file it pointed to is left alone). A replaced file keeps its permission bits; a new one gets
``0o666 & ~umask`` (not ``mkstemp``'s ``0o600``).

Failures to write (missing folder, no permission, disk full) become
:class:`~libredgetpu_ros.errors.OutputError` naming the final path; any other exception from the caller's
block passes through unchanged after the clean-up.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from libredgetpu_ros.errors import OutputError
from libredgetpu_ros.textdata import clip

__all__ = ["atomic_directory", "atomic_open", "atomic_path", "atomic_write_bytes", "atomic_write_text",
           "commit_file", "fsync_directory", "make_folder", "rename_noreplace"]


# errno values of a write that reached the file system and failed: these mean "cannot write the output"
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS})


def _shown(path: Path) -> str:
    return clip(str(path))  # a path in a message is user text: bounded


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename or creation inside ``directory`` durable (no-op where a folder cannot be fsync'ed)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass    # e.g. EINVAL on some network/FUSE file systems: the rename still happened
    finally:
        os.close(fd)


def _current_umask() -> int:
    """The process umask, read without changing it (``os.umask`` sets it: a racing thread would see 0o000)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _final_mode(final: Path, default: int) -> int:
    """Keep the permissions of the file being replaced; a new file gets the usual ``default & ~umask``."""
    try:
        return final.stat().st_mode & 0o7777
    except OSError:
        return default & ~_current_umask()


def _existing_folder(final: Path) -> Path:
    """The folder ``final`` goes in; OutputError when it does not exist (nothing here creates it)."""
    folder = final.parent
    if not folder.is_dir():
        raise OutputError(f"cannot write {_shown(final)}: folder {_shown(folder)} does not exist")
    return folder


def _final_kind(final: Path) -> int | None:
    """``final``'s ``lstat`` mode (None: absent); a FIFO, device or socket is refused: the rename would
    replace it (as root, ``/dev/null`` replaced by a file would be the write)."""
    import stat

    try:
        mode = os.lstat(final).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # a name too long, a loop: the temporary beside it could not be made either
        raise OutputError(f"cannot write {_shown(final)}: {exc.strerror or exc}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode)):
        raise OutputError(f"cannot write {_shown(final)}: it is a FIFO, device or socket, not replaced")
    return mode


def _checked_folder(final: Path) -> Path:
    """The folder of a file to write; ``final`` may be missing, a regular file or a symlink (replaced)."""
    import stat

    folder = _existing_folder(final)
    mode = _final_kind(final)
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"cannot write {_shown(final)}: it is a folder")
    return folder


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None,
                newline: str | None = None) -> Iterator[IO]:
    """Yield a file object open on a temporary beside ``path``; on a clean exit it replaces ``path`` durably.

    ``mode`` is ``"wb"`` (default) or ``"w"`` (text; ``encoding`` defaults to UTF-8). On an exception or
    interruption inside the block the temporary is removed and ``path`` keeps its old content.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_open writes whole files: mode must be 'wb' or 'w', not {mode!r}")
    final = Path(path)
    folder = _checked_folder(final)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name[:200]}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise OutputError(f"cannot write into {_shown(folder)}: {exc.strerror or exc}") from exc
    tmp = Path(tmp_name)
    text = mode == "w"
    handle = os.fdopen(fd, mode, encoding=(encoding or "utf-8") if text else None,
                       newline=newline if text else None)
    try:
        try:
            yield handle
        except OSError as exc:
            if exc.errno in _WRITE_ERRNOS:   # the caller's write failed; its other OSErrors stay its own
                raise OutputError(f"cannot write {_shown(final)}: {exc.strerror or exc}") from exc
            raise
        try:
            handle.flush()
            os.fsync(handle.fileno())
            handle.close()
            os.chmod(tmp, _final_mode(final, 0o666))
            os.replace(tmp, final)
        except OSError as exc:
            raise OutputError(f"cannot write {_shown(final)}: {exc.strerror or exc}") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            handle.close()
        _remove(tmp)
        raise
    fsync_directory(folder)


def make_folder(path: str | os.PathLike) -> Path:
    """``mkdir -p`` for an output folder; OutputError (naming it) when it cannot be made."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot make the folder {_shown(folder)}: {exc.strerror or exc}") from None
    return folder


def commit_file(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Publish a temporary a caller filled itself (a resumable ``.part`` download) onto ``final``: fsync it,
    rename it over ``final`` and fsync the folder. Both must be in the same folder."""
    tmp, final = Path(tmp), Path(final)
    try:
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except OSError as exc:
        raise OutputError(f"cannot write {_shown(final)}: {exc.strerror or exc}") from exc
    fsync_directory(final.parent)


def atomic_write_bytes(path: str | os.PathLike, data: bytes | bytearray | memoryview) -> int:
    """Write ``data`` to ``path`` atomically and durably; returns the number of bytes written."""
    view = memoryview(data).cast("B")
    with atomic_open(path, "wb") as handle:
        handle.write(view)
    return view.nbytes


def atomic_write_text(path: str | os.PathLike, text: str, *, encoding: str = "utf-8") -> int:
    """Write ``text`` to ``path`` atomically and durably; returns the number of bytes written."""
    return atomic_write_bytes(path, text.encode(encoding))


def _fsync_tree(root: Path) -> None:
    """fsync every file and folder under ``root`` (itself included) before ``root`` is renamed."""
    if not root.is_dir() or root.is_symlink():
        with open(root, "rb") as handle:
            os.fsync(handle.fileno())
        return
    for folder, _subfolders, files in os.walk(root):
        for name in files:
            file_path = Path(folder, name)
            if not file_path.is_symlink():
                with open(file_path, "rb") as handle:
                    os.fsync(handle.fileno())
        fsync_directory(folder)


# renameat2() flags (linux/fs.h)
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@functools.cache
def _renameat2() -> Any:
    """libc's ``renameat2`` (glibc >= 2.28), looked up once; None where the C library has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the symbols already loaded into this process
    except OSError:
        return None
    return getattr(libc, "renameat2", None)


def _rename_with(src: Path, dst: Path, flags: int) -> bool:
    """``renameat2(src, dst, flags)``: True when done, False where the C library, kernel or file system has
    no such rename; OSError (FileExistsError for RENAME_NOREPLACE onto a name) for any other failure."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(dst))


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing names in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False when unavailable."""
    return _rename_with(a, b, _RENAME_EXCHANGE)


def rename_noreplace(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename ``src`` to ``dst`` unless ``dst`` exists, then sync ``dst``'s folder. One step where the
    kernel can (``renameat2(RENAME_NOREPLACE)``), else a check then ``os.rename`` (a name appearing between
    the two is replaced). OutputError when ``dst`` exists or the rename fails."""
    src, dst = Path(src), Path(dst)
    try:
        done = _rename_with(src, dst, _RENAME_NOREPLACE)
        if not done:
            if dst.exists() or dst.is_symlink():
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst))
            os.rename(src, dst)
    except FileExistsError:
        raise OutputError(f"output {_shown(dst)} already exists: not replaced") from None
    except OSError as exc:
        raise OutputError(f"cannot publish {_shown(dst)}: {exc.strerror or exc}") from exc
    fsync_directory(dst.parent)


def _publish(tmp: Path, final: Path) -> None:
    """Move ``tmp`` onto ``final``. A file, or a folder onto nothing, is one ``os.replace``; a folder onto an
    existing folder is swapped in one step where the kernel can, else the old one is set aside until the new
    one is in place and put back if that fails."""
    if not (tmp.is_dir() and final.exists()):
        os.replace(tmp, final)
        return
    if _exchange(tmp, final):
        _remove(tmp)    # tmp now holds the old content
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{final.name[:200]}.", suffix=".old", dir=final.parent))
    os.rmdir(aside)
    os.replace(final, aside)
    try:
        os.replace(tmp, final)
    except BaseException:
        os.replace(aside, final)
        raise
    _remove(aside)


@contextlib.contextmanager
def _atomic_target(path: str | os.PathLike, *, make_folder: bool) -> Iterator[Path]:
    final = Path(path)
    folder = _existing_folder(final)
    _final_kind(final)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name[:200]}.", suffix=".tmp", dir=folder))
        if not make_folder:
            os.rmdir(tmp)   # the name stays ours in practice: hidden, random, in the caller's output folder
    except OSError as exc:
        raise OutputError(f"cannot write into {_shown(folder)}: {exc.strerror or exc}") from exc
    try:
        try:
            yield tmp
        except OSError as exc:
            if exc.errno in _WRITE_ERRNOS:
                raise OutputError(f"cannot write {_shown(final)}: {exc.strerror or exc}") from exc
            raise
        if not tmp.exists():
            raise OutputError(f"cannot write {_shown(final)}: the writer created nothing at {_shown(tmp)}")
        if final.exists() and final.is_dir() != tmp.is_dir():
            kind = "folder" if final.is_dir() else "file"
            raise OutputError(f"cannot write {_shown(final)}: a {kind} of that name is in the way")
        try:
            _fsync_tree(tmp)
            os.chmod(tmp, _final_mode(final, 0o777 if tmp.is_dir() else 0o666))
            _publish(tmp, final)
        except OSError as exc:
            raise OutputError(f"cannot write {_shown(final)}: {exc.strerror or exc}") from exc
    except BaseException:
        _remove(tmp)
        raise
    fsync_directory(folder)


def atomic_path(path: str | os.PathLike) -> contextlib.AbstractContextManager[Path]:
    """Yield a path beside ``path`` that does not exist yet; whatever the block creates there (a file or a
    folder, e.g. a bag a library writes itself) is fsync'ed and renamed onto ``path`` on a clean exit, removed
    otherwise."""
    return _atomic_target(path, make_folder=False)


def atomic_directory(path: str | os.PathLike) -> contextlib.AbstractContextManager[Path]:
    """Yield an empty temporary folder beside ``path``; on a clean exit its whole tree is fsync'ed and it
    replaces ``path`` (a folder); on an exception or interruption it is removed and ``path`` keeps its old
    content."""
    return _atomic_target(path, make_folder=True)
