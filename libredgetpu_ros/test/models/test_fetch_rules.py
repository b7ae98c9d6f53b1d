"""`models fetch` keeps its rules on every hop and in the cache (issue 30 items 3 and 5): a redirect to
ftp:// or file:// refused (urllib followed ftp and the deadline did not watch it: `--timeout 4` ran 90 s), a
`.part` or destination that is a symlink never followed (the outside file grew from 8 bytes to the model),
a 5,000-digit Content-Length, `--mirror 'http://[::1'`, CR/LF in `--mirror` and `--timeout 1e308` as one
`error:` line each. Every server is a thread on 127.0.0.1."""

from __future__ import annotations

import hashlib
import socket
import threading
from pathlib import Path

import pytest
from libredgetpu_ros.errors import ModelSourceError

from .test_models_hardening import ENTRY, _fetch_cli, _model_bytes, client_closed_within, raw_server

pytestmark = pytest.mark.timeout(60)


class SilentListener:
    """A TCP listener on 127.0.0.1 that accepts and never answers (an FTP server that never greets);
    counts connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.accepted: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.accepted.append(self.sock.accept()[0])
            except (TimeoutError, OSError):
                continue

    def __enter__(self) -> SilentListener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)
        for conn in self.accepted:
            conn.close()
        self.sock.close()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]


def _redirect_to(target: str):
    def reply(conn: socket.socket, _: bytes) -> None:
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % target.encode())
    return reply


@pytest.mark.parametrize("scheme", ["ftp", "file"])
def test_a_redirect_to_another_scheme_is_refused(cache: Path, capsys: pytest.CaptureFixture[str],
                                                 scheme: str) -> None:
    """Before: the 302 to ftp://127.0.0.1 was followed (to a silent FTP server: past --timeout)."""
    with SilentListener() as ftp:
        target = f"ftp://127.0.0.1:{ftp.port}/x" if scheme == "ftp" else "file:///etc/hostname"
        with raw_server(_redirect_to(target)) as url:
            code, err = _fetch_cli(url, capsys, "--timeout", "4")
        assert ftp.accepted == []  # never connected to: the refusal, not the deadline, ended it
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error: ") and "302 redirect refused" in lines[-1], err
    assert f"{scheme}:" in lines[-1] and "deadline" not in err, err


def test_one_deadline_over_every_hop(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three redirects, each answered after a 0.8 s stall, then a server that never answers: `--timeout 2`
    ends the whole chain (not 2 s per hop), so it is cut inside the third stall at the latest (2.4 s of
    stalls > 2 s) and the silent server is never reached; with a deadline per hop every stall would run out
    and the silent server get the connection."""
    stalls: list[tuple[int, bool]] = []  # (hop, the client closed before the stall ended)
    with SilentListener() as silent:
        final = f"http://127.0.0.1:{silent.port}/m"

        def slow(conn: socket.socket, head: bytes) -> None:
            hop = int(head.split(b"hop=")[1].split()[0]) if b"hop=" in head else 0
            closed = client_closed_within(conn, 0.8)
            stalls.append((hop, closed))
            if not closed:
                _redirect_to(final if hop >= 2 else f"/m?hop={hop + 1}")(conn, head)

        with raw_server(slow) as url:
            code, err = _fetch_cli(url, capsys, "--timeout", "2")
        assert silent.accepted == [], stalls
    assert code == 1 and "2 s deadline" in err, err
    assert stalls and stalls[-1][1] and not any(closed for _, closed in stalls[:-1]), stalls


def _serve_model(data: bytes):
    def reply(conn: socket.socket, _: bytes) -> None:  # ignores Range: a 200 with the whole file
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    return reply


def test_a_part_that_is_a_symlink_is_never_written_through(cache: Path, fixtures_dir: Path,
                                                           tmp_path: Path) -> None:
    """Before: the resume appended through the link (the outside file grew from 8 to the model's size)."""
    from libredgetpu_ros.models.download import download
    from libredgetpu_ros.models.store import entry

    name, data = _model_bytes(fixtures_dir)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"8 bytes!")
    cache.mkdir(parents=True)
    (cache / f"{name}.part").symlink_to(outside)
    with raw_server(_serve_model(data)) as url:
        download(f"{url}/{name}", cache / name, entry(ENTRY).edgetpu.sha256)
    assert outside.read_bytes() == b"8 bytes!"
    dest = cache / name
    assert not dest.is_symlink()
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == entry(ENTRY).edgetpu.sha256


def test_a_destination_that_is_a_symlink_is_replaced_not_read(cache: Path, fixtures_dir: Path,
                                                              tmp_path: Path) -> None:
    """A cached name linking to a file outside the cache (even one with the right bytes) is not taken as
    cached: the file is fetched and the link replaced; the outside file is untouched."""
    from libredgetpu_ros.models.download import download
    from libredgetpu_ros.models.store import entry

    name, data = _model_bytes(fixtures_dir)
    outside = tmp_path / "outside.tflite"
    outside.write_bytes(data)
    cache.mkdir(parents=True)
    (cache / name).symlink_to(outside)
    served: list[bytes] = []

    def reply(conn: socket.socket, head: bytes) -> None:
        served.append(head)
        _serve_model(data)(conn, head)

    with raw_server(reply) as url:
        download(f"{url}/{name}", cache / name, entry(ENTRY).edgetpu.sha256)
    assert len(served) == 1 and not (cache / name).is_symlink() and outside.read_bytes() == data


@pytest.mark.parametrize(("args", "words"), [
    (["--mirror", "http://[::1"], "not a valid URL"),
    (["--mirror", "http://127.0.0.1:1/a\r\nerror: forged"], "not a URL"),
    (["--mirror", "ftp://127.0.0.1/"], "only http(s)"),
    (["--mirror", "http://127.0.0.1:99999/"], "not a valid URL"),
    (["--timeout", "1e308"], "--timeout must be a positive number"),
])
def test_bad_arguments_are_one_error_line(cache: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                          words: str) -> None:
    """Before: ValueError traceback (`[::1`), the CR/LF split the error line, 1e308 a traceback from the
    watchdog's thread and exit 0."""
    from libredgetpu_ros.cli.main import main

    code = main(["models", "fetch", ENTRY, "--no-progress", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and words in err, err
    assert "Traceback" not in err and "\r" not in err


def test_a_5000_digit_content_length_is_one_error_line(cache: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ValueError (Python's 4,300-digit int limit) as a traceback."""
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n"
    with raw_server(lambda conn, _: conn.sendall(reply)) as url:
        code, err = _fetch_cli(url, capsys)
    last = err.strip().splitlines()[-1]
    assert code == ModelSourceError.exit_code and last.startswith("error: ") and "Content-Length" in last, err
    assert len(last) < 600 and "Traceback" not in err


def test_a_resolver_that_never_answers_is_under_the_deadline(cache: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The C resolver has no timeout: a DNS server that never answers (here getaddrinfo blocking 60 s, as
    with an unreachable nameserver) held the fetch past --timeout."""
    release = threading.Event()
    entered, returned = threading.Event(), threading.Event()
    real = socket.getaddrinfo

    def silent_dns(host, *args, **kwargs):
        if host == "models.invalid":
            entered.set()
            release.wait(20)  # stops by itself: a fetch without the deadline ends here, with gaierror
            returned.set()
            raise socket.gaierror("released")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", silent_dns)
    try:
        code, err = _fetch_cli("http://models.invalid", capsys, "--timeout", "1.5")
        still_resolving = entered.is_set() and not returned.is_set()
    finally:
        release.set()
    assert code == 1 and "1.5 s deadline" in err, err
    assert still_resolving  # the fetch returned while the resolver was blocked, not after it gave up
