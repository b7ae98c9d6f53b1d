"""Fixture ``cache``: the models cache folder under a private ``XDG_CACHE_HOME`` (no models folder or mirror
from the environment), where ``models fetch`` writes.

Fixture ``file_server``: the class of a loopback HTTP server (127.0.0.1, a thread) serving files by name,
with Range support and faults; use it as ``with file_server(folder) as srv: ... srv.url``.

Faults per file name: ``truncate[name] = n`` announces the full length but sends only n bytes and closes;
``corrupt`` names are served with their first byte flipped; ``ignore_range`` answers every request 200.
``requests`` records (file name, Range header or None, bytes sent).
"""

from __future__ import annotations

import http.server
import re
import threading
from pathlib import Path

import pytest

_RANGE = re.compile(r"bytes=(\d+)-$")


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FileServer

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep test output quiet

    def do_GET(self) -> None:
        srv = self.server
        name = self.path.lstrip("/")
        path = srv.folder / name
        if "/" in name or not path.is_file():
            self.send_error(404)
            srv.requests.append((name, None, 0))
            return
        data = bytearray(path.read_bytes())
        if name in srv.corrupt:
            data[0] ^= 0xFF
        wanted = self.headers.get("Range")
        match = _RANGE.match(wanted or "")
        start = int(match.group(1)) if match and not srv.ignore_range else 0
        if start >= len(data) and start:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.end_headers()
            srv.requests.append((name, wanted, 0))
            return
        body = bytes(data[start:])
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = srv.truncate.pop(name, None)
        sent = body if cut is None else body[:cut]
        self.wfile.write(sent)
        self.wfile.flush()
        if cut is not None:
            self.close_connection = True
        srv.requests.append((name, wanted, len(sent)))


class FileServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, folder: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.folder = folder
        self.truncate: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.ignore_range = False
        self.requests: list[tuple[str, str | None, int]] = []
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> FileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def file_server() -> type[FileServer]:
    return FileServer


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("LIBREDGETPU_ROS_MODELS", raising=False)
    monkeypatch.delenv("LIBREDGETPU_ROS_MODEL_MIRROR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "libredgetpu_ros" / "models"
