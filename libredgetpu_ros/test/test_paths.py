"""paths.open_regular / check_regular / read_regular: a FIFO, a device, a socket, a folder or a symlink to one
of them is refused without blocking; a file over the budget is refused before it is read. file_kind names
what is at a path without opening it; ``follow=False`` refuses a symbolic link even to a regular file."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from libredgetpu_ros.errors import InputError, ModelFetchError, WeightsError
from libredgetpu_ros.paths import check_regular, file_kind, open_regular, read_regular

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


def test_file_kind_names_what_is_there_without_opening_it(specials: dict[str, Path], tmp_path: Path) -> None:
    regular = tmp_path / "f.bin"
    regular.write_bytes(b"x")
    link = tmp_path / "link_to_file"
    link.symlink_to(regular)
    assert file_kind(regular) is None and file_kind(link) is None  # a link to a regular file is followed
    assert file_kind(link, follow=False) == "a symbolic link"
    assert file_kind(specials["a FIFO "]) == "a FIFO" and file_kind(specials["a FIFO "], follow=False) == (
        "a symbolic link")
    for kind in ("a FIFO", "a socket", "a folder", "a device"):
        assert file_kind(specials[kind]) == kind
    assert file_kind(specials["does not exist"]) == "missing" and file_kind(tmp_path / "none") == "missing"
    assert file_kind("a\0b") == "not a valid path"


def test_open_regular_without_following_refuses_a_link_to_a_regular_file(tmp_path: Path) -> None:
    regular = tmp_path / "f.bin"
    regular.write_bytes(b"x")
    link = tmp_path / "link"
    link.symlink_to(regular)
    with open_regular(regular, "f", follow=False) as handle:
        assert handle.read() == b"x"
    with pytest.raises(ModelFetchError, match="is a symbolic link, not a regular file"):
        open_regular(link, "cached model", error=ModelFetchError, follow=False)
