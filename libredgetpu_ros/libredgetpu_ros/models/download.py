"""Resumable, verified download of one file over HTTP(S), with an atomic final rename.

The bytes go to ``<dest>.part``. A later call with the same ``.part`` present asks the server for the rest
(``Range: bytes=N-``): a ``206`` reply is appended, a ``200`` (server ignores ranges) starts over, a ``416``
means the part already holds everything. Only when the transfer is complete (the length the server
announced) and the SHA-256 matches is ``.part`` renamed over ``dest`` (``os.replace``: readers see the old
file or the new one, never half of one). A truncated transfer keeps ``.part`` for the next resume; a
checksum mismatch deletes it (resuming bad bytes cannot help). Errors are :class:`ModelFetchError` with the
URL and what happened. ROS-free.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from libredgetpu_ros.errors import ModelFetchError

CHUNK = 1 << 16
TIMEOUT_S = 30.0  # per socket operation, not for the whole file
MAX_BYTES = 1 << 30  # no catalogue file comes near this; a larger announced size is refused up front
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


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


def _open(url: str, offset: int) -> tuple[http.client.HTTPResponse | None, int]:
    request = urllib.request.Request(url, headers={"User-Agent": "libredgetpu-ros-models"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:
            return None, 416
        raise ModelFetchError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ModelFetchError(f"{url}: cannot connect ({reason})") from exc
    return response, response.status


def _expected_total(response: http.client.HTTPResponse, status: int, offset: int, url: str) -> int | None:
    """Full file size the server announced (None: it did not say)."""
    if status == 206:
        match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", "").strip())
        if not match or int(match.group(1)) != offset:
            raise ModelFetchError(f"{url}: resume refused: bad Content-Range "
                                  f"{response.headers.get('Content-Range')!r} for offset {offset}")
        return None if match.group(3) == "*" else int(match.group(3))
    length = response.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def download(url: str, dest: Path, sha256: str, *, progress: bool = False) -> Path:
    """Fetch ``url`` into ``dest`` unless ``dest`` already has the right SHA-256; returns ``dest``."""
    if not url.startswith(("https://", "http://")):
        raise ModelFetchError(f"{url}: only http(s) URLs are fetched")
    if dest.is_file() and sha256_of(dest) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = _part(dest)
    offset = part.stat().st_size if part.is_file() else 0
    response, status = _open(url, offset)
    if response is not None:
        with response:
            total = _expected_total(response, status, offset, url)
            if total is not None and total > MAX_BYTES:
                raise ModelFetchError(f"{url}: the server announces {total} bytes, more than the "
                                      f"{MAX_BYTES}-byte limit for a model file")
            if status != 206:
                offset = 0  # the server sent the whole file: start the part over
            with part.open("ab" if offset else "wb") as out, \
                    _progress(total, offset, dest.name, progress) as bar:
                received = offset
                try:
                    for block in iter(lambda: response.read(CHUNK), b""):
                        out.write(block)
                        received += len(block)
                        if received > MAX_BYTES:
                            raise ModelFetchError(f"{url}: more than {MAX_BYTES} bytes; refused")
                        bar.update(len(block))
                except (OSError, http.client.HTTPException) as exc:  # connection reset / cut mid-body
                    raise ModelFetchError(f"{url}: transfer interrupted after {received} bytes ({exc}); "
                                          f"run the command again to resume") from exc
            if total is not None and received < total:
                raise ModelFetchError(f"{url}: truncated transfer: got {received} of {total} bytes; "
                                      f"run the command again to resume")
    got = sha256_of(part)
    if got != sha256:
        size = part.stat().st_size
        part.unlink()
        raise ModelFetchError(f"{url}: checksum mismatch for {dest.name}: SHA-256 {got} ({size} bytes), "
                              f"expected {sha256}; the download was discarded")
    os.replace(part, dest)
    return dest
