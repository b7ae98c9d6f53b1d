"""``template_set.current_set`` reads the journal of a set being replaced without ever blocking on what sits
at its name: a FIFO there (from the start, or swapped in right after a look at the path), a symbolic link,
a folder or an oversized file is no journal (the final names are read), and the call returns at once.

The swap is reproduced exactly: the first look at the journal's path (``Path.is_file`` / ``os.stat`` of it)
finds the regular journal, then the file is replaced by a real FIFO before ``current_set`` goes on. A plain
``open()`` of that FIFO blocks until a writer comes (a node's configure hung there); each call runs on a
thread joined with a timeout, and a blocked one is released by opening the FIFO for writing.
"""

from __future__ import annotations

import json
import os
import pathlib
import threading
from pathlib import Path

import pytest
from libredgetpu_ros.robotics import template_set
from libredgetpu_ros.robotics.template_set import current_set, journal_path

NAME = "color_red_64x64"
FILES = [f"{NAME}.tflite", f"{NAME}_edgetpu.json", f"{NAME}_edgetpu.tflite"]
RETURN_S = 5.0  # a non-blocking read answers in milliseconds; a blocked open() never does


def _staged(folder: Path) -> tuple[Path, Path]:
    """A whole stage and the journal naming it (what write_set leaves between its steps 2 and 4)."""
    base = folder / NAME
    stage = folder / f".{NAME}.set.0123456789abcdef"
    stage.mkdir()
    for name in FILES:
        (stage / name).write_bytes(b"staged " + name.encode())
    journal_path(base).write_text(json.dumps({"stage": stage.name, "files": FILES}))
    return base, stage / NAME


def _within_timeout(base: Path) -> Path:
    """``current_set(base)`` on a thread; fails (after releasing a blocked open) unless it returns in time."""
    result: list[Path] = []
    thread = threading.Thread(target=lambda: result.append(current_set(base)), daemon=True)
    thread.start()
    thread.join(RETURN_S)
    if thread.is_alive():
        journal = journal_path(base)
        fd = os.open(journal, os.O_WRONLY | os.O_NONBLOCK)  # the blocked reader's open returns now
        os.close(fd)
        thread.join(RETURN_S)
        pytest.fail(f"current_set blocked for {RETURN_S:.0f} s opening the FIFO at {journal.name}")
    return result[0]


def test_a_whole_stage_named_by_the_journal_is_read(tmp_path: Path) -> None:
    base, staged = _staged(tmp_path)
    assert _within_timeout(base) == staged


def test_a_fifo_at_the_journal_name_is_no_journal(tmp_path: Path) -> None:
    base, _ = _staged(tmp_path)
    journal_path(base).unlink()
    os.mkfifo(journal_path(base))
    assert _within_timeout(base) == base


def test_a_fifo_swapped_in_after_the_check_never_blocks(tmp_path: Path, monkeypatch) -> None:
    base, staged = _staged(tmp_path)
    journal = journal_path(base)
    swapped: list[str] = []

    def swap_after_look(look):
        def looked(self, *args, **kwargs):
            answer = look(self, *args, **kwargs)
            if Path(self) == journal and not swapped:  # the look saw the regular journal; now a FIFO
                journal.unlink()
                os.mkfifo(journal)
                swapped.append(look.__name__)
            return answer
        return looked

    for name in ("is_file", "exists", "stat", "lstat"):
        monkeypatch.setattr(pathlib.Path, name, swap_after_look(getattr(pathlib.Path, name)))
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        answer = real_stat(path, *args, **kwargs)
        if str(path) == str(journal) and not swapped:
            journal.unlink()
            os.mkfifo(journal)
            swapped.append("os.stat")
        return answer

    monkeypatch.setattr(template_set.os, "stat", stat_then_swap)
    got = _within_timeout(base)
    # Read before any swap (the journal opened directly), or the FIFO refused: never blocked.
    assert got == (base if swapped else staged), (got, swapped)


@pytest.mark.parametrize("kind", ["symlink", "folder", "oversized"])
def test_other_things_at_the_journal_name_are_no_journal(tmp_path: Path, kind: str) -> None:
    base, _ = _staged(tmp_path)
    journal = journal_path(base)
    record = journal.read_text()
    journal.unlink()
    if kind == "symlink":  # a link to a valid journal: the journal is ours, never a link
        target = tmp_path / "elsewhere.json"
        target.write_text(record)
        journal.symlink_to(target)
    elif kind == "folder":
        journal.mkdir()
    else:
        journal.write_text(record + " " * 8192)
    assert _within_timeout(base) == base
