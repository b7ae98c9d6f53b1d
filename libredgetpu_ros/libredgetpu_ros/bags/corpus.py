"""A corpus of bags for ``process-bags`` / ``compare-bags``: which bags the inputs hold and what each
one's output is called (ROS-free).

An input is a bag (a folder with ``metadata.yaml``, or a single ``.mcap`` / ``.db3`` file) or a folder of
bags, searched below it: a folder with ``metadata.yaml`` is one bag, otherwise its ``.mcap`` / ``.db3``
files are single-file bags and its sub-folders are searched in turn (hidden entries, e.g. a writer's
``.<name>.<random>.tmp``, and symlinked folders are not followed; depth bounded). A bag's output name is
its own name (a file's without its suffix) for a bag given directly, and its path relative to the folder
given for a bag found in one (``fleet/robot1/day1`` given as ``fleet`` -> ``robot1/day1``), so a fleet's
folder layout is kept under the output folder. Two inputs with one output name are refused before
anything runs (bad input): an output is never overwritten, and never the wrong one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from libredgetpu_ros.errors import InputError

BAG_FILE_SUFFIXES = (".mcap", ".db3")
MAX_DEPTH = 16  # folder levels searched below an input
MAX_BAGS = 100_000  # a corpus larger than this is refused, not listed until memory runs out
SUMMARY_NAME = "summary.json"  # process-bags' summary in its output folder (no bag may take the name)


@dataclass(frozen=True)
class CorpusBag:
    """One input bag and the name of its output (a relative POSIX path under the output folder)."""

    input: Path
    name: str

    def output(self, out_dir: str | Path) -> Path:
        return Path(out_dir, *PurePosixPath(self.name).parts)


def is_bag_folder(path: Path) -> bool:
    return (path / "metadata.yaml").is_file()


def _bag_file_stem(path: Path) -> str | None:
    for suffix in BAG_FILE_SUFFIXES:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.name[: -len(suffix)]
    return None


def _search(root: Path, folder: Path, depth: int, found: list[CorpusBag]) -> None:
    if depth > MAX_DEPTH:
        raise InputError(f"input {root}: folders nested deeper than {MAX_DEPTH} levels at {folder}")
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        raise InputError(f"input {folder} cannot be listed: {exc.strerror or exc}") from None
    for entry in entries:
        if entry.name.startswith("."):
            continue  # temporaries of interrupted writers, editors' files
        path = Path(entry.path)
        relative = path.relative_to(root).as_posix()
        if entry.is_dir(follow_symlinks=False):
            if is_bag_folder(path):
                found.append(CorpusBag(path, relative))
            else:
                _search(root, path, depth + 1, found)
        elif (stem := _bag_file_stem(path)) is not None and entry.is_file():
            found.append(CorpusBag(path, str(PurePosixPath(relative).with_name(stem))))
        if len(found) > MAX_BAGS:
            raise InputError(f"input {root}: more than {MAX_BAGS} bags")


def find_bags(inputs: list[str | Path]) -> list[CorpusBag]:
    """The bags of ``inputs`` in the order given (a folder's in name order); InputError for a missing input,
    a folder without bags, or two bags with one output name."""
    bags: list[CorpusBag] = []
    for given in inputs:
        path = Path(given)
        if not path.exists():
            raise InputError(f"input {path} does not exist")
        if path.is_dir() and is_bag_folder(path):
            bags.append(CorpusBag(path, path.resolve().name))
        elif path.is_file():
            stem = _bag_file_stem(path)
            if stem is None:
                raise InputError(f"input {path} is not a bag (a folder with metadata.yaml, a .mcap or .db3 "
                                 f"file) nor a folder of bags")
            bags.append(CorpusBag(path, stem))
        else:
            found: list[CorpusBag] = []
            _search(path, path, 0, found)
            if not found:
                raise InputError(f"input {path}: no bags in it (folders with metadata.yaml, .mcap or .db3 "
                                 f"files)")
            bags += found
    by_name: dict[str, CorpusBag] = {}
    for bag in bags:
        if bag.name == SUMMARY_NAME or bag.name.startswith("."):
            raise InputError(f"bag {bag.input}: its output name {bag.name!r} is reserved")
        other = by_name.get(bag.name)
        if other is not None:
            raise InputError(f"bags {other.input} and {bag.input} would have the same output {bag.name!r}: "
                             f"give their parent folder instead, or rename one")
        by_name[bag.name] = bag
    return bags


def outputs_in(folder: str | Path) -> dict[str, Path]:
    """The bags of a process-bags output folder (or one bag: itself under its name), by output name:
    what ``compare-bags`` pairs between two runs."""
    path = Path(folder)
    if path.is_file() or is_bag_folder(path):
        return {path.name if path.is_dir() else (_bag_file_stem(path) or path.name): path}
    if not path.is_dir():
        raise InputError(f"{path} is neither a bag nor a folder of bags")
    found: list[CorpusBag] = []
    _search(path, path, 0, found)
    return {bag.name: bag.input for bag in found}
