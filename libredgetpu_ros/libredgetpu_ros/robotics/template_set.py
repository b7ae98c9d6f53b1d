"""A template's files (compiled model, twin, sidecar) replaced as one unit, so a kill at any point leaves a
set that loads (written one at a time, a kill between two files left a new compiled model beside an old
twin, and the previous template was lost).

Three names in a folder cannot change in one rename, so the new set is staged and a journal says which set
is whole while the names are being replaced. In folder ``F`` for template ``NAME``:

1. the new files are written into a hidden stage ``F/.NAME.set.<random>/`` under their final names, each
   fsync'ed, then the stage folder;
2. the journal ``F/.NAME.set.json`` naming the stage is written atomically: from here on :func:`current_set`
   (used by the template loader) reads the staged set;
3. each final name is replaced (a hard link of the staged file renamed over it: ``os.replace``; a copy where
   the file system has no hard links), the folder fsync'ed;
4. the journal is removed (the final names now hold the new set), then every stage folder of ``NAME``.

A kill before 2 leaves the old set under the final names (and a stage nobody reads, removed by the next
write); between 2 and 4 the loader reads the complete stage; after 4 the final names hold the new set. One
writer per template at a time (as for any file the package writes).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path

from libredgetpu_ros.atomicio import atomic_write_bytes, fsync_directory
from libredgetpu_ros.errors import LibrEdgeTpuError, OutputError
from libredgetpu_ros.paths import open_regular
from libredgetpu_ros.textdata import clip

_JOURNAL = ".{name}.set.json"
_STAGE_PREFIX = ".{name}.set."
_STAGE_SUFFIX = re.compile(r"[0-9a-f]{16}")
_MAX_JOURNAL_BYTES = 4096  # a stage name and a few file names


def journal_path(base: Path) -> Path:
    return base.with_name(_JOURNAL.format(name=base.name))


def _stages(base: Path) -> list[Path]:
    prefix = _STAGE_PREFIX.format(name=base.name)
    try:
        entries = list(base.parent.iterdir())
    except OSError:
        return []
    return [p for p in entries if p.name.startswith(prefix) and _STAGE_SUFFIX.fullmatch(p.name[len(prefix):])
            and p.is_dir() and not p.is_symlink()]


def current_set(base: Path) -> Path:
    """The base path ``folder/NAME`` to read template ``NAME``'s files from: the stage the journal names
    while a replacement is under way (when that stage holds every file the journal lists), else ``base``."""
    try:
        # Opened without blocking, the link itself refused, checked on the opened file: a FIFO, a device or
        # a symlink at the journal's name (even one swapped in after a look at the path) is no journal, and
        # never blocks the loader (a node's configure) in open().
        with open_regular(journal_path(base), "template set journal", _MAX_JOURNAL_BYTES,
                          follow=False) as handle:
            record = json.loads(handle.read(_MAX_JOURNAL_BYTES))
        stage_name, names = record["stage"], record["files"]
    except (LibrEdgeTpuError, OSError, ValueError, TypeError, KeyError):
        return base
    prefix = _STAGE_PREFIX.format(name=base.name)
    if not (isinstance(stage_name, str) and stage_name.startswith(prefix)
            and _STAGE_SUFFIX.fullmatch(stage_name[len(prefix):]) and isinstance(names, list)
            and all(isinstance(n, str) and n and "/" not in n for n in names)):
        return base
    stage = base.parent / stage_name
    if all((stage / name).is_file() for name in names):
        return stage / base.name
    return base


def _tmp_name(final: Path) -> Path:
    return final.with_name(f".{final.name}.{secrets.token_hex(8)}.tmp")


def _leftovers(folder: Path, names: list[str]) -> list[Path]:
    """Temporaries of :func:`_place` / :func:`_write_journal` a kill left for ``names`` in ``folder``."""
    pattern = re.compile("|".join(rf"\.{re.escape(n)}\.[0-9a-f]{{16}}\.tmp" for n in names))
    try:
        return [p for p in folder.iterdir() if pattern.fullmatch(p.name) and not p.is_dir()]
    except OSError:
        return []


def _place(staged: Path, final: Path) -> None:
    """``final`` replaced by the bytes of ``staged`` in one rename."""
    tmp = _tmp_name(final)
    try:
        os.link(staged, tmp)
    except OSError:  # no hard links here: a copy, written and renamed atomically
        atomic_write_bytes(final, staged.read_bytes())
        return
    try:
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _write_journal(journal: Path, text: str) -> None:
    """The journal written to a temporary, fsync'ed and renamed (its temporary named like _place's, so a
    later write finds what a kill left)."""
    tmp = _tmp_name(journal)
    try:
        with open(tmp, "wb") as handle:
            handle.write(text.encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, journal)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_directory(journal.parent)


def write_set(base: Path, files: Mapping[str, bytes]) -> list[Path]:
    """Replace the files ``{file name: bytes}`` of template ``base`` (``folder/NAME``) as one unit (see the
    module docstring); returns the final paths. OutputError when the folder cannot be written."""
    folder = base.parent
    stage = folder / f"{_STAGE_PREFIX.format(name=base.name)}{secrets.token_hex(8)}"
    try:
        stage.mkdir()
        for name, data in files.items():
            with open(stage / name, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        fsync_directory(stage)
        fsync_directory(folder)
        _write_journal(journal_path(base), json.dumps({"stage": stage.name, "files": sorted(files)}))
        for name in files:
            _place(stage / name, folder / name)
        fsync_directory(folder)
        journal_path(base).unlink()
        fsync_directory(folder)
    except OSError as exc:
        raise OutputError(f"cannot write template {clip(str(base))}: {exc.strerror or exc}") from exc
    finally:
        if not journal_path(base).exists():  # the final names hold a whole set: no stage is needed
            for old in _stages(base):
                shutil.rmtree(old, ignore_errors=True)
            for stale in _leftovers(folder, [*files, journal_path(base).name]):
                with contextlib.suppress(OSError):
                    stale.unlink()
    return [folder / name for name in files]
