"""Resumable, verified download of one file over HTTP(S), with an atomic final rename.

The bytes go to ``<dest>.part``. A later call with the same ``.part`` present asks the server for the rest
(``Range: bytes=N-``): a ``206`` reply whose ``Content-Range`` starts at N, runs to the end and agrees with
its ``Content-Length`` is appended; a ``200`` (server ignores ranges) starts over; a ``416`` whose
``Content-Range: bytes */T`` says T == N means the part already holds everything. Any other answer to a
resume (a server lying about the range) discards the ``.part`` and starts over once, in the same call, so a
bad part never poisons later fetches. Only when the transfer is complete (the length the server announced)
and the SHA-256 matches is ``.part`` fsync'ed and renamed over ``dest`` (:func:`atomicio.commit_file`:
readers see the old file or the new one, never half of one). A truncated transfer keeps ``.part`` for the
next resume; a checksum mismatch or a stream over :data:`MAX_BYTES` deletes it.

Every file has an overall deadline (``deadline_s``, default :data:`DEADLINE_S`) on top of the per-operation
socket timeout: a server that trickles a byte every few seconds, in the headers or the body, is cut off
when it expires (a watchdog shuts the socket down). Errors are :class:`ModelFetchError` with the URL and
what happened, never an ``http.client`` exception; text the server sent is cut to a bounded length.
ROS-free.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from libredgetpu_ros.atomicio import commit_file
from libredgetpu_ros.errors import ModelFetchError, ModelSourceError, OutputError
from libredgetpu_ros.textdata import clip

CHUNK = 1 << 16
TIMEOUT_S = 30.0  # per socket operation
DEADLINE_S = 600.0  # per file, whole transfer: ~10 MB at 17 kB/s; `models fetch --timeout` changes it
MAX_BYTES = 1 << 30  # no catalogue file comes near this; a larger announced size is refused up front
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes \*/(\d+)")


def _clip(text: object) -> str:
    """Server-sent text for a one-line error: control characters escaped, bounded length."""
    return clip(str(text).encode("unicode_escape", "backslashreplace").decode("ascii"))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _part(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


def _progress(total: int | None, initial: int, label: str, enabled: bool) -> Any:  # a tqdm bar
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="B", unit_scale=True, unit_divisor=1024, desc=label,
                disable=not enabled, leave=False)


class _Deadline:
    """The overall time limit of one file: when it passes, every socket opened for it is shut down, which
    wakes any read blocked on it (a per-operation timeout cannot: a trickle resets it with every byte)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def remaining(self) -> float:
        return max(0.01, self.end - time.monotonic())

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            expired = self.expired
        if expired:
            self._shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            sockets = list(self._sockets)
        for sock in sockets:
            self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    """urllib's usual opener (proxies, redirects) whose HTTP(S) connections register with ``deadline``."""

    def watched(base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        class Watched(base):  # type: ignore[valid-type,misc]
            def connect(self) -> None:
                super().connect()
                deadline.watch(self.sock)
        return Watched

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(watched(http.client.HTTPConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            extra = {"check_hostname": self._check_hostname} if hasattr(self, "_check_hostname") else {}
            return self.do_open(watched(http.client.HTTPSConnection), req, context=self._context, **extra)

    return urllib.request.build_opener(Http, Https)


def _open(url: str, offset: int, deadline: _Deadline) -> tuple[http.client.HTTPResponse | None, int, str]:
    """(response or None, status, Content-Range of a 416) for a request from ``offset``."""
    request = urllib.request.Request(url, headers={"User-Agent": "libredgetpu-ros-models"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = _opener(deadline).open(request, timeout=min(TIMEOUT_S, deadline.remaining()))
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:
            unsatisfied = exc.headers.get("Content-Range", "") if exc.headers else ""
            exc.close()
            return None, 416, unsatisfied
        raise ModelFetchError(f"{url}: HTTP {exc.code} {_clip(exc.reason)}") from None
    except urllib.error.URLError as exc:
        _check_deadline(deadline, url, "")
        raise ModelFetchError(f"{url}: cannot connect ({_clip(exc.reason)}); without internet access: "
                              "`libredgetpu-ros models import DIR` from a folder holding the files, or "
                              "--mirror URL of a site copy") from None
    except (OSError, http.client.HTTPException) as exc:  # bad status line, too many / too long headers
        _check_deadline(deadline, url, "")
        raise ModelSourceError(f"{url}: not a valid HTTP reply ({type(exc).__name__}: "
                               f"{_clip(exc)})") from None
    return response, response.status, ""


def _check_deadline(deadline: _Deadline, url: str, progress: str) -> None:
    if deadline.expired:
        raise ModelFetchError(f"{url}: no complete reply within the {deadline.seconds:g} s deadline{progress}"
                              f"; run the command again (with --timeout) to resume") from None


class _BadResume(Exception):
    """The server's answer to a Range request does not describe the rest of the file: start over."""


def _expected_total(response: http.client.HTTPResponse, status: int, offset: int, url: str) -> int | None:
    """Full file size the server announced (None: it did not say). For a 206, ``_BadResume`` unless the
    Content-Range is exactly the open-ended range asked for (start == offset, end == total - 1 when the
    total is known) and agrees with Content-Length."""
    length = response.headers.get("Content-Length")
    length_value = int(length) if length and length.isdigit() else None
    if status != 206:
        return length_value
    header = response.headers.get("Content-Range", "") or ""
    match = _CONTENT_RANGE.fullmatch(header.strip())
    if not match:
        raise _BadResume(f"unreadable Content-Range {_clip(header)}")
    start, end = int(match.group(1)), int(match.group(2))
    total = None if match.group(3) == "*" else int(match.group(3))
    if start != offset or end < start or (total is not None and end != total - 1):
        raise _BadResume(f"Content-Range {_clip(header)} for a request from byte {offset}")
    if length_value is not None and length_value != end - start + 1:
        raise _BadResume(f"Content-Range {_clip(header)} with Content-Length {length_value}")
    return total


def _transfer(url: str, dest: Path, part: Path, deadline: _Deadline, progress: bool) -> None:
    """One request: fill ``part`` (resuming from its size). ``_BadResume`` when the server's reply to a
    resume cannot be appended."""
    offset = part.stat().st_size if part.is_file() else 0
    response, status, unsatisfied = _open(url, offset, deadline)
    if response is None:  # 416 to a resume: fine only if the part is exactly the file's size
        match = _UNSATISFIED_RANGE.fullmatch(unsatisfied.strip())
        if not match or int(match.group(1)) != offset:
            raise _BadResume(f"416 with Content-Range {_clip(unsatisfied)} for a part of {offset} bytes")
        return
    with response:
        total = _expected_total(response, status, offset, url)
        if total is not None and total > MAX_BYTES:
            raise ModelSourceError(f"{url}: the server announces {total} bytes, more than the "
                                  f"{MAX_BYTES}-byte limit for a model file")
        if status != 206:
            offset = 0  # the server sent the whole file: start the part over
        received = offset
        with part.open("ab" if offset else "wb") as out, _progress(total, offset, dest.name, progress) as bar:
            try:
                while block := response.read1(CHUNK):  # what has arrived: a trickle cannot hold a CHUNK
                    out.write(block)
                    received += len(block)
                    if received > MAX_BYTES:
                        raise ModelSourceError(f"{url}: more than {MAX_BYTES} bytes; refused")
                    bar.update(len(block))
                    if deadline.expired:
                        break
            except ModelFetchError:
                out.close()
                part.unlink(missing_ok=True)  # an endless stream leaves nothing behind
                raise
            except (OSError, http.client.HTTPException) as exc:  # connection reset / cut mid-body
                _check_deadline(deadline, url, f" (got {received} bytes)")
                raise ModelFetchError(f"{url}: transfer interrupted after {received} bytes "
                                      f"({type(exc).__name__}: {_clip(exc)}); run the command again to "
                                      f"resume") from None
        _check_deadline(deadline, url, f" (got {received} bytes)")
        if total is not None and received < total:
            raise ModelFetchError(f"{url}: truncated transfer: got {received} of {total} bytes; "
                                  f"run the command again to resume")


def download(url: str, dest: Path, sha256: str, *, progress: bool = False,
             deadline_s: float = DEADLINE_S) -> Path:
    """Fetch ``url`` into ``dest`` unless ``dest`` already has the right SHA-256; returns ``dest``.
    The whole transfer must end within ``deadline_s`` seconds."""
    if not url.startswith(("https://", "http://")):
        raise ModelSourceError(f"{_clip(url)}: only http(s) URLs are fetched")
    if not deadline_s > 0:
        raise ModelSourceError(f"the download deadline must be > 0 seconds, got {deadline_s}")
    if dest.is_file() and sha256_of(dest) == sha256:
        return dest
    part = _part(dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with _Deadline(deadline_s) as deadline:
            try:
                _transfer(url, dest, part, deadline, progress)
            except _BadResume:  # the part cannot be continued from this server: drop it, one fresh start
                part.unlink(missing_ok=True)
                try:
                    _transfer(url, dest, part, deadline, progress)
                except _BadResume as again:  # a 206 to a request without Range
                    raise ModelFetchError(f"{url}: {again}") from None
    except OSError as exc:  # network errors are ModelFetchErrors already: this is the local side
        raise ModelFetchError(f"cannot write {clip(str(part))}: {exc.strerror or exc}") from None
    got = sha256_of(part)
    if got != sha256:
        size = part.stat().st_size
        part.unlink()
        raise ModelSourceError(f"{url}: checksum mismatch for {dest.name}: SHA-256 {got} ({size} bytes), "
                              f"expected {sha256}; the download was discarded")
    try:
        commit_file(part, dest)
    except OutputError as exc:
        raise ModelFetchError(str(exc)) from exc
    return dest
