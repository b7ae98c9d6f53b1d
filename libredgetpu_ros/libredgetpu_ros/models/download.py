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

Every file has an overall deadline (``deadline_s``, default :data:`DEADLINE_S`, at most
:data:`MAX_DEADLINE_S`) on top of the per-operation socket timeout: a server that trickles a byte every few
seconds, in the headers, the TLS handshake or the body, is cut off when it expires (a watchdog shuts down
every socket of the transfer, registered as soon as it is created), and so is a name resolution that never
ends (getaddrinfo runs in a thread joined within the deadline). Only http and https are spoken, on
every hop: a redirect to any other scheme (``ftp://``, ``file://``) is refused, and the opener has no
handler for them either. ``.part`` and ``dest`` are never followed through a symbolic link: the part is
opened with ``O_NOFOLLOW`` (a link or any non-regular file there is removed, never written through) and a
linked ``dest`` is replaced, not read. Errors are :class:`ModelFetchError` with the URL and what happened,
never an ``http.client`` or ``urllib`` exception; text from the server or the user (URLs included) is
escaped and cut to a bounded length. ROS-free.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from libredgetpu_ros.atomicio import commit_file
from libredgetpu_ros.errors import ModelFetchError, ModelSourceError, OutputError
from libredgetpu_ros.paths import file_kind, open_regular
from libredgetpu_ros.textdata import clip

CHUNK = 1 << 16
TIMEOUT_S = 30.0  # per socket operation
DEADLINE_S = 600.0  # per file, whole transfer: ~10 MB at 17 kB/s; `models fetch --timeout` changes it
MAX_DEADLINE_S = 7 * 86400.0  # threading.Timer overflows near 9.2e9 s; a week is already no limit
SCHEMES = ("http", "https")  # on every hop, redirects included
MAX_BYTES = 1 << 30  # no catalogue file comes near this; a larger announced size is refused up front
# At most 19 digits (< 2^63): int() of a longer header would hit Python's digit limit (a ValueError).
_CONTENT_RANGE = re.compile(r"bytes ([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19}|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes \*/([0-9]{1,19})")
_LENGTH = re.compile(r"[0-9]{1,19}")


def _clip(text: object) -> str:
    """Server-sent text for a one-line error: control characters escaped, bounded length."""
    return clip(str(text).encode("unicode_escape", "backslashreplace").decode("ascii"))


def sha256_of(path: Path, what: str = "model file", *, follow: bool = True) -> str:
    """SHA-256 of a regular file's bytes, opened by :func:`paths.open_regular` (a FIFO or device swapped in
    is refused, never a hang); ``follow=False``: a symbolic link is refused too. ModelFetchError naming
    ``what`` and ``path`` otherwise."""
    digest = hashlib.sha256()
    with open_regular(path, what, error=ModelFetchError, follow=follow) as f:
        try:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        except OSError as exc:
            raise ModelFetchError(f"{what} {clip(str(path))}: cannot read: {exc.strerror or exc}") from None
    return digest.hexdigest()


def check_url(url: str) -> None:
    """ModelSourceError unless ``url`` is a well-formed http(s) URL without control characters (a CR/LF
    in `--mirror` split the error line; `http://[::1` raised urllib's ValueError)."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url) or len(url) > 4096:
        raise ModelSourceError(f"{_clip(url)}: not a URL (spaces, control characters or over 4096 "
                               f"characters)")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError as exc:
        raise ModelSourceError(f"{_clip(url)}: not a valid URL ({_clip(exc)})") from None
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        raise ModelSourceError(f"{_clip(url)}: only http(s) URLs with a host are fetched")


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


def _resolve(address: tuple[str, int], deadline: _Deadline) -> list[tuple[Any, ...]]:
    """getaddrinfo within what remains of the deadline (the C resolver has no timeout of its own: a DNS
    server that never answers held a fetch past --timeout). A resolver still running when the deadline
    passes is left to finish in its daemon thread."""
    found: list[Any] = []

    def run() -> None:
        try:
            found.append(socket.getaddrinfo(address[0], address[1], 0, socket.SOCK_STREAM))
        except OSError as exc:
            found.append(exc)

    worker = threading.Thread(target=run, name="getaddrinfo", daemon=True)
    worker.start()
    worker.join(deadline.remaining())
    if not found:
        raise TimeoutError(f"resolving {address[0]} did not finish within the deadline")
    if isinstance(found[0], OSError):
        raise found[0]
    return found[0]


class _Redirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, each hop's URL checked (urllib itself follows http, https and ftp)."""

    max_redirections = 10

    def http_error_302(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                       headers: Any) -> Any:
        location = headers.get("location") or headers.get("uri")
        if location:
            try:
                check_url(urllib.parse.urljoin(req.full_url, location))
            except (ModelSourceError, ValueError) as exc:
                fp.close()
                raise ModelSourceError(f"{_clip(req.full_url)}: HTTP {code} redirect refused: "
                                       f"{exc}") from None
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    """An opener for http(s) only (proxies, checked redirects; no ftp, file or data handler) whose
    connections register with ``deadline`` as soon as the TCP connection exists (before a TLS handshake)."""

    def watched(base: type[http.client.HTTPConnection]) -> type[http.client.HTTPConnection]:
        def connect(address: Any, timeout: Any = None, source: Any = None) -> socket.socket:
            """socket.create_connection, each socket watched from its creation (the connect itself and a
            TLS handshake are under the deadline) and the name resolution bounded by it too."""
            last: OSError | None = None
            for family, kind, proto, _, sockaddr in _resolve(address, deadline):
                sock = socket.socket(family, kind, proto)
                deadline.watch(sock)
                try:
                    sock.settimeout(min(TIMEOUT_S, deadline.remaining()))
                    if source:
                        sock.bind(source)
                    sock.connect(sockaddr)
                    return sock
                except OSError as exc:
                    last = exc
                    sock.close()
            raise last or OSError(f"no address for {address[0]}")

        class Watched(base):  # type: ignore[valid-type,misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._create_connection = connect  # http.client's hook, used before any TLS wrap
        return Watched

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(watched(http.client.HTTPConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            extra = {"check_hostname": self._check_hostname} if hasattr(self, "_check_hostname") else {}
            return self.do_open(watched(http.client.HTTPSConnection), req, context=self._context, **extra)

    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(), Http(), Https(),
                    urllib.request.HTTPDefaultErrorHandler(), _Redirects(),
                    urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener


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
        raise ModelFetchError(f"{_clip(url)}: HTTP {exc.code} {_clip(exc.reason)}") from None
    except urllib.error.URLError as exc:
        _check_deadline(deadline, url, "")
        raise ModelFetchError(f"{_clip(url)}: cannot connect ({_clip(exc.reason)}); without internet access: "
                              "`libredgetpu-ros models import DIR` from a folder holding the files, or "
                              "--mirror URL of a site copy") from None
    except (OSError, http.client.HTTPException) as exc:  # bad status line, too many / too long headers
        _check_deadline(deadline, url, "")
        if isinstance(exc, TimeoutError):
            raise ModelFetchError(f"{_clip(url)}: no reply within {TIMEOUT_S:g} s") from None
        raise ModelSourceError(f"{_clip(url)}: not a valid HTTP reply ({type(exc).__name__}: "
                               f"{_clip(exc)})") from None
    return response, response.status, ""


def _check_deadline(deadline: _Deadline, url: str, progress: str) -> None:
    if deadline.expired or time.monotonic() >= deadline.end - 0.05:  # a socket timeout cut to what remained
        raise ModelFetchError(f"{_clip(url)}: no complete reply within the {deadline.seconds:g} s deadline"
                              f"{progress}; run the command again (with --timeout) to resume") from None


class _BadResume(Exception):
    """The server's answer to a Range request does not describe the rest of the file: start over."""


def _expected_total(response: http.client.HTTPResponse, status: int, offset: int, url: str) -> int | None:
    """Full file size the server announced (None: it did not say). For a 206, ``_BadResume`` unless the
    Content-Range is exactly the open-ended range asked for (start == offset, end == total - 1 when the
    total is known) and agrees with Content-Length."""
    length = (response.headers.get("Content-Length") or "").strip()
    if length and not _LENGTH.fullmatch(length):
        raise ModelSourceError(f"{_clip(url)}: Content-Length {_clip(length)} is not a byte count")
    length_value = int(length) if length else None
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
    kind = file_kind(part, follow=False)
    if kind is not None and kind != "missing":  # a link (or anything else) is never written through
        part.unlink()
    offset = part.stat().st_size if kind is None else 0
    response, status, unsatisfied = _open(url, offset, deadline)
    if response is None:  # 416 to a resume: fine only if the part is exactly the file's size
        match = _UNSATISFIED_RANGE.fullmatch(unsatisfied.strip())
        if not match or int(match.group(1)) != offset:
            raise _BadResume(f"416 with Content-Range {_clip(unsatisfied)} for a part of {offset} bytes")
        return
    with response:
        total = _expected_total(response, status, offset, url)
        if total is not None and total > MAX_BYTES:
            raise ModelSourceError(f"{_clip(url)}: the server announces {total} bytes, more than the "
                                  f"{MAX_BYTES}-byte limit for a model file")
        if status != 206:
            offset = 0  # the server sent the whole file: start the part over
        received = offset
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        flags |= os.O_APPEND if offset else os.O_TRUNC
        with os.fdopen(os.open(part, flags, 0o644), "wb") as out, \
                _progress(total, offset, dest.name, progress) as bar:
            try:
                while block := response.read1(CHUNK):  # what has arrived: a trickle cannot hold a CHUNK
                    out.write(block)
                    received += len(block)
                    if received > MAX_BYTES:
                        raise ModelSourceError(f"{_clip(url)}: more than {MAX_BYTES} bytes; refused")
                    bar.update(len(block))
                    if deadline.expired:
                        break
            except ModelFetchError:
                out.close()
                part.unlink(missing_ok=True)  # an endless stream leaves nothing behind
                raise
            except (OSError, http.client.HTTPException) as exc:  # connection reset / cut mid-body
                _check_deadline(deadline, url, f" (got {received} bytes)")
                raise ModelFetchError(f"{_clip(url)}: transfer interrupted after {received} bytes "
                                      f"({type(exc).__name__}: {_clip(exc)}); run the command again to "
                                      f"resume") from None
        _check_deadline(deadline, url, f" (got {received} bytes)")
        if total is not None and received < total:
            raise ModelFetchError(f"{_clip(url)}: truncated transfer: got {received} of {total} bytes; "
                                  f"run the command again to resume")


def download(url: str, dest: Path, sha256: str, *, progress: bool = False,
             deadline_s: float = DEADLINE_S) -> Path:
    """Fetch ``url`` into ``dest`` unless ``dest`` already has the right SHA-256; returns ``dest``.
    The whole transfer must end within ``deadline_s`` seconds."""
    check_url(url)
    if not 0 < deadline_s <= MAX_DEADLINE_S:
        raise ModelSourceError(f"the download deadline must be 0 < seconds <= {MAX_DEADLINE_S:g}, "
                               f"got {deadline_s}")
    if file_kind(dest, follow=False) is None and sha256_of(dest, follow=False) == sha256:
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
                    raise ModelFetchError(f"{_clip(url)}: {again}") from None
    except OSError as exc:  # network errors are ModelFetchErrors already: this is the local side
        raise ModelFetchError(f"cannot write {clip(str(part))}: {exc.strerror or exc}") from None
    got = sha256_of(part, "download", follow=False)  # replaced by a link meanwhile: not ours to read
    if got != sha256:
        size = part.stat().st_size
        part.unlink()
        raise ModelSourceError(f"{_clip(url)}: checksum mismatch for {dest.name}: SHA-256 {got} ({size} "
                               f"bytes), expected {sha256}; the download was discarded")
    try:
        commit_file(part, dest)
    except OutputError as exc:
        raise ModelFetchError(str(exc)) from exc
    return dest
