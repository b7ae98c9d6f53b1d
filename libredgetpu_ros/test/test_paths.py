"""paths.open_regular / check_regular / read_regular: a FIFO, a device, a socket, a folder or a symlink to one
of them is refused without blocking; a file over the budget is refused before it is read."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from libredgetpu_ros.errors import InputError, WeightsError
from libredgetpu_ros.paths import check_regular, open_regular, read_regular

pytestmark = pytest.mark.timeout(30)  # a regression blocks on the FIFO: the timeout names it


@pytest.fixture
def specials(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    link = tmp_path / "link_to_fifo"
    link.symlink_to(fifo)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nothing")
    yield {"a FIFO": fifo, "a socket": sock, "a folder": tmp_path, "a device": Path("/dev/zero"),
           "a FIFO ": link, "does not exist": dangling}
    server.close()


@pytest.mark.parametrize("reader", [check_regular, open_regular, lambda p, w, e=InputError: read_regular(
    p, w, 1 << 20, e)])
def test_special_files_are_refused_without_blocking(specials: dict[str, Path], reader) -> None:
    for kind, path in specials.items():
        with pytest.raises(InputError) as info:
            reader(path, "readout")
        assert kind.strip() in str(info.value), (kind, str(info.value))


def test_size_budget_and_error_type(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100)
    assert check_regular(path, "f", 100) == 100 and read_regular(path, "f", 100) == b"x" * 100
    with open_regular(path, "f", 100) as handle:
        assert handle.read() == b"x" * 100
    for reader in (check_regular, open_regular):
        with pytest.raises(WeightsError, match="100 bytes is larger than the 99 accepted"):
            reader(path, "f", 99, WeightsError)
    with pytest.raises(InputError, match="cannot be opened: File name too long"):
        open_regular(tmp_path / ("x" * 300) / "y", "f")
    with pytest.raises(InputError, match="not a valid path"):
        check_regular("a\0b", "f")
    long = str(tmp_path / "fifo") + "/" + "y" * 100_000
    with pytest.raises(InputError) as info:
        open_regular(long, "f")
    assert len(str(info.value)) < 400
