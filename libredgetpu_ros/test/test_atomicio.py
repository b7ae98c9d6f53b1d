"""atomicio: a write that fails or is interrupted part-way leaves the old file (or folder) as it was."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from libredgetpu_ros.atomicio import atomic_directory, atomic_open, atomic_path, atomic_write_bytes
from libredgetpu_ros.errors import OutputError

from libredgetpu_ros import atomicio

OLD = b"old content\n" * 100


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_write_bytes_replaces_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "a.bin"
    out.write_bytes(OLD)
    assert atomic_write_bytes(out, b"new") == 3
    assert out.read_bytes() == b"new"
    assert _leftovers(tmp_path) == []
    assert atomicio.atomic_write_text(tmp_path / "b.txt", "héllo") == 6
    assert (tmp_path / "b.txt").read_text(encoding="utf-8") == "héllo"


def test_new_file_gets_umask_permissions_and_replaced_file_keeps_its_own(tmp_path):
    mask = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "new.bin", b"x")
    finally:
        os.umask(mask)
    assert (tmp_path / "new.bin").stat().st_mode & 0o777 == 0o644    # not mkstemp's 0600
    kept = tmp_path / "kept.bin"
    kept.write_bytes(OLD)
    kept.chmod(0o640)
    atomic_write_bytes(kept, b"y")
    assert kept.stat().st_mode & 0o777 == 0o640


def test_disk_full_part_way_keeps_the_old_file(tmp_path):
    out = tmp_path / "w.npz"
    out.write_bytes(OLD)
    disk_full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with pytest.raises(OutputError, match=r"cannot write .*w\.npz: No space"), atomic_open(out) as handle:
        handle.write(b"partial" * 1000)
        raise disk_full
    assert out.read_bytes() == OLD
    assert _leftovers(tmp_path) == []


def test_fsync_failure_keeps_the_old_file(tmp_path, monkeypatch):
    out = tmp_path / "w.bin"
    out.write_bytes(OLD)

    def failing_fsync(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(atomicio.os, "fsync", failing_fsync)
    with pytest.raises(OutputError, match="Input/output error"):
        atomic_write_bytes(out, b"new" * 10_000)
    assert out.read_bytes() == OLD
    assert _leftovers(tmp_path) == []


def test_interrupt_keeps_the_old_file_and_propagates(tmp_path):
    out = tmp_path / "w.bin"
    out.write_bytes(OLD)
    with pytest.raises(KeyboardInterrupt), atomic_open(out) as handle:
        handle.write(b"half")
        raise KeyboardInterrupt
    assert out.read_bytes() == OLD
    assert _leftovers(tmp_path) == []


def test_callers_own_errors_pass_through_unchanged(tmp_path):
    out = tmp_path / "w.txt"
    # e.g. the caller failed to read its input: not a write error
    with pytest.raises(FileNotFoundError), atomic_open(out, "w") as handle:
        handle.write("x")
        (tmp_path / "missing").read_bytes()
    with pytest.raises(ValueError, match="boom"), atomic_open(out, "w"):
        raise ValueError("boom")
    assert not out.exists()
    assert _leftovers(tmp_path) == []


def test_missing_folder_and_folder_in_the_way_are_typed(tmp_path):
    with pytest.raises(OutputError, match="does not exist"):
        atomic_write_bytes(tmp_path / "nope" / "x.bin", b"x")
    for target in (atomic_path, atomic_directory):  # the same check, before any temporary is made
        with pytest.raises(OutputError, match=r"folder .* does not exist"), target(tmp_path / "nope" / "bag"):
            pass
    (tmp_path / "d").mkdir()
    with pytest.raises(OutputError, match="is a folder"):
        atomic_write_bytes(tmp_path / "d", b"x")
    with pytest.raises(ValueError, match="mode"), atomic_open(tmp_path / "x", "ab"):
        pass


def test_atomic_path_publishes_what_the_writer_created(tmp_path):
    out = tmp_path / "bag"
    with atomic_path(out) as target:
        assert not target.exists() and target.parent == tmp_path
        target.mkdir()
        (target / "metadata.yaml").write_text("x: 1\n")
    assert (out / "metadata.yaml").read_text() == "x: 1\n"
    with pytest.raises(OutputError, match="created nothing"), atomic_path(tmp_path / "empty"):
        pass
    with pytest.raises(RuntimeError), atomic_path(tmp_path / "file.mcap") as target:
        target.write_bytes(b"half")
        raise RuntimeError
    assert not (tmp_path / "file.mcap").exists()
    assert _leftovers(tmp_path) == []


def test_atomic_directory_swaps_a_full_folder_and_keeps_it_on_failure(tmp_path):
    out = tmp_path / "weights"
    out.mkdir()
    (out / "old.bin").write_bytes(OLD)
    with pytest.raises(RuntimeError), atomic_directory(out) as folder:
        (folder / "new.bin").write_bytes(b"new")
        raise RuntimeError
    assert sorted(p.name for p in out.iterdir()) == ["old.bin"]
    with atomic_directory(out) as folder:
        (folder / "new.bin").write_bytes(b"new")
    assert sorted(p.name for p in out.iterdir()) == ["new.bin"]
    assert _leftovers(tmp_path) == []


def test_atomic_directory_without_kernel_exchange_sets_the_old_one_aside(tmp_path, monkeypatch):
    monkeypatch.setattr(atomicio, "_exchange", lambda a, b: False)
    out = tmp_path / "weights"
    out.mkdir()
    (out / "old.bin").write_bytes(OLD)
    with atomic_directory(out) as folder:
        (folder / "new.bin").write_bytes(b"new")
    assert sorted(p.name for p in out.iterdir()) == ["new.bin"]
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("kernel", ["renameat2", "no renameat2"])
def test_rename_noreplace_moves_a_folder_and_never_replaces_an_existing_name(tmp_path, monkeypatch, kernel):
    if kernel == "no renameat2":  # libc or kernel without it: a check, then os.rename
        monkeypatch.setattr(atomicio, "_renameat2", lambda: None)
    staged, final = tmp_path / "staged", tmp_path / "out" / "bag"
    staged.mkdir()
    (staged / "data.db3").write_bytes(b"new")
    final.parent.mkdir()
    atomicio.rename_noreplace(staged, final)
    assert (final / "data.db3").read_bytes() == b"new" and not staged.exists()

    for existing in (final, tmp_path / "file", tmp_path / "empty"):  # a full folder, a file, an empty folder
        if existing.name == "file":
            existing.write_bytes(OLD)
        elif existing.name == "empty":
            existing.mkdir()
        other = tmp_path / f"other-{existing.name}"
        other.mkdir()
        with pytest.raises(OutputError, match="already exists: not replaced"):
            atomicio.rename_noreplace(other, existing)
        assert other.is_dir()  # nothing moved
    assert (final / "data.db3").read_bytes() == b"new" and (tmp_path / "file").read_bytes() == OLD


def test_rename_noreplace_failure_is_an_output_error(tmp_path):
    with pytest.raises(OutputError, match=r"cannot publish .*missing-folder"):
        atomicio.rename_noreplace(tmp_path / "no-such-source", tmp_path / "missing-folder" / "x")


_WRITER = textwrap.dedent("""
    import sys
    from libredgetpu_ros.atomicio import atomic_open
    chunk = bytes([int(sys.argv[2])]) * (1 << 20)
    print("ready", flush=True)
    while True:
        with atomic_open(sys.argv[1]) as handle:
            for _ in range(16):
                handle.write(chunk)
""")


def test_kill_9_mid_write_never_leaves_a_partial_file(tmp_path):
    """A real process rewriting a 16 MB file in a loop is SIGKILLed at 8 different moments: the final name
    always holds one whole version (the old one or a new one), never a cut one."""
    out = tmp_path / "out.bin"
    out.write_bytes(b"\x01" * (16 << 20))
    for attempt in range(8):
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(out), str(2 + attempt)],
                                stdout=subprocess.PIPE)
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(0.02 + 0.03 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
        data = out.read_bytes()
        assert len(data) == 16 << 20
        assert data.count(data[:1]) == len(data)
    for stale in tmp_path.glob(".out.bin.*.tmp"):      # what kill -9 leaves: hidden temporaries only
        stale.unlink()


def test_commit_file_publishes_a_kept_temporary(tmp_path):
    part, out = tmp_path / "m.tflite.part", tmp_path / "m.tflite"
    out.write_bytes(OLD)
    part.write_bytes(b"new model")
    atomicio.commit_file(part, out)
    assert out.read_bytes() == b"new model" and not part.exists()
    with pytest.raises(OutputError, match="cannot write"):
        atomicio.commit_file(part, out)  # the temporary is gone: typed, the published file untouched
    assert out.read_bytes() == b"new model"


def test_a_fifo_or_device_is_never_replaced(tmp_path):
    """A write aimed at a FIFO (or, as root, at /dev/null: a service request's path) is refused before
    anything is written; before, the rename replaced the FIFO / device node with a regular file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for write in (lambda p: atomic_write_bytes(p, b"x"), lambda p: atomic_path(p).__enter__()):
        with pytest.raises(OutputError, match="FIFO, device or socket, not replaced"):
            write(fifo)
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and _leftovers(tmp_path) == []
