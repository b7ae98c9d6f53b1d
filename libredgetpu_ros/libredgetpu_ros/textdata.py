"""Bounded reading of user text data: YAML and JSON files a user hands us, and their values in messages.

Every YAML or JSON file the package reads on a user's behalf (IOSpecs, reference programs, ``mgk --table``,
trace and replay cases, bag ``metadata.yaml`` and offered-QoS strings, node parameter files) goes through
here, so one set of rules holds for all of them:

- **Size** is checked before the bytes are read (files) or parsed (text); a file must be a regular one
  (``paths.open_regular``: a FIFO, device, socket or folder is refused by its kind, never blocked on).
- **Text is UTF-8**, decoded strictly: a UTF-16 file or a Latin-1 byte is refused with the
  ``UnicodeDecodeError`` kind and the byte offset (femtorun and ROS tools read these files as UTF-8 text).
- **YAML** is loaded by PyYAML's own (pure-Python) ``SafeLoader`` whatever the text's size, so a text is
  valid or not by one set of rules: PyYAML's, which femtorun, launch and most Python tools use (libyaml's C
  loader takes a few texts PyYAML refuses, e.g. ``a:<tab>1``). A first pass over the
  parser's events, which is iterative, bounds the **nesting depth** (the C composer recurses on the C
  stack: ``[`` x 100,000 segfaults the interpreter) and the **alias expansion**:
  the nodes a consumer would walk if it expanded every alias (a 1.2 KB "billion laughs" file expands to
  10^9 nodes; PyYAML shares the objects, so loading is cheap but any walk, ``repr`` or dump is not). An
  alias to an enclosing node (a recursive structure) cannot be expanded at all and is refused. Aliases
  within the budget load as PyYAML loads them.
- **JSON** nesting depth is measured on the bytes with NumPy (strings masked out) before ``json.loads``,
  so deep nesting is refused instead of raising RecursionError.
- Every failure is a :class:`~libredgetpu_ros.errors.TextDataError` (an ``InputError``: one CLI ``error:``
  line, exit 2) naming the origin, with ``kind`` = the parser's exception class (``ScannerError``,
  ``JSONDecodeError``, ``UnicodeDecodeError``, ``ValueError``...) or ``"limit"`` for a refused budget.
- :func:`clip` (defined in errors.py, which builds messages too) / :func:`clip_repr` bound user text and
  values echoed in messages (``reprlib`` never builds the whole ``repr`` of an expanded value).
"""

from __future__ import annotations

import json
import os
import reprlib
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from libredgetpu_ros.errors import CLIP, InputError, TextDataError, clip
from libredgetpu_ros.paths import file_kind, open_regular

MAX_BYTES = 16 * 1024 * 1024       # default size budget of one file
MAX_YAML_BYTES = 4 * 1024 * 1024   # default for YAML, loaded in pure Python (~3.5 s of CPU per MB): a
#                                    reader that expects more passes its own max_bytes
MAX_DEPTH = 100                    # nesting levels; configs and specs use < 10. The pure-Python YAML
#                                    composer (femtorun's) hits RecursionError near 500
MAX_ALIAS_NODES = 100_000          # nodes that alias references add when expanded
# libyaml and PyYAML's own parser disagree on a few inputs (a tab libyaml takes and PyYAML refuses; a
# syntax error named ParserError by one and ScannerError by the other). Every text is loaded by PyYAML's
# loader, so whether a file is valid does not depend on its size (the C loader is 3-4x faster, but choosing
# it by size made a file valid above 128 KB and invalid below); the cost is linear in size, bounded by each
# reader's max_bytes (MAX_YAML_BYTES by default; bench/results/textdata.md). libyaml, when present, only
# speeds up the budget pass, whose syntax verdict is left to that loader.
_C_LOADER = getattr(yaml, "CSafeLoader", None)
_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxdict, _repr.maxlist, _repr.maxtuple, _repr.maxset = 3, 6, 6, 6, 6
_repr.maxstring, _repr.maxother, _repr.maxlong = 60, 60, 40


def clip_repr(value: object, limit: int = CLIP) -> str:
    """A bounded ``repr`` (few levels and items, short strings) of any value, however large or shared."""
    try:
        text = _repr.repr(value)
    except (ValueError, RecursionError) as exc:  # e.g. an int beyond the int-to-str digit limit
        text = f"<{type(value).__name__}: {type(exc).__name__}>"
    return clip(text, limit)


def _one_line(exc: BaseException) -> str:
    """A parser's message on one line (PyYAML's span several: the CLI prints one ``error:`` line), cut."""
    return clip(" ".join(str(exc).split()), 400)


# The kind of a path that cannot be read, as Python's open() would name it (femtorun opens these files so).
_OPEN_KINDS = {"missing": "FileNotFoundError", "a folder": "IsADirectoryError"}


def read_file(path: str | Path, what: str, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of a user file: a regular file (:func:`paths.open_regular`: a FIFO, device, socket or
    folder is refused by its kind, never blocked on), its size checked before reading."""
    p = Path(path)
    try:
        handle = open_regular(p, what)
    except InputError as exc:
        raise TextDataError(str(exc), kind=_OPEN_KINDS.get(file_kind(p) or "", "OSError"),
                            origin=str(p)) from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:
            raise TextDataError(f"{what} {clip(p)}: {size} bytes is larger than the {max_bytes} accepted",
                                kind="limit", origin=str(p))
        try:  # at most one byte past the budget: a file that grew, or a /proc file that reports size 0
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise TextDataError(f"{what} {clip(p)}: cannot read: {exc}", kind=type(exc).__name__,
                                origin=str(p)) from None
    if len(data) > max_bytes:
        raise TextDataError(f"{what} {clip(p)}: larger than the {max_bytes} bytes accepted", kind="limit",
                            origin=str(p))
    return data


def decode_utf8(data: bytes | str, origin: str) -> str:
    """Strict UTF-8 (a leading BOM is kept, as Python's text files keep it; YAML skips it)."""
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TextDataError(f"{origin}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                            f"({exc.reason})", kind="UnicodeDecodeError", origin=origin,
                            detail=str(exc)) from None


# ----- YAML ------------------------------------------------------------------------------------------

def check_yaml_events(text: str, origin: str, max_depth: int = MAX_DEPTH,
                      max_alias_nodes: int = MAX_ALIAS_NODES, loader_class: Any = None) -> bool:
    """Refuse nesting deeper than ``max_depth`` or aliases expanding to more than ``max_alias_nodes`` nodes.

    Walks the parser's events (iterative: no recursion, nothing composed). A syntax error is left for the
    loader to report, so the verdict on a malformed file is the parser's own; returns False then (the text
    was checked up to the error only), True when the whole stream was checked."""
    stack: list[list] = []        # per open collection: [expanded node count, anchor]
    anchors: dict[str, int] = {}  # anchor -> expanded node count of its node (complete nodes only)
    open_anchors: set[str] = set()
    added = 0
    loader = (loader_class or _C_LOADER or yaml.SafeLoader)(text)
    try:
        while True:
            try:
                if not loader.check_event():
                    return True
                event = loader.get_event()
            except yaml.YAMLError:
                return False  # the loader reports it
            kind = type(event)
            if kind is yaml.ScalarEvent:
                if event.anchor is not None:
                    anchors[event.anchor] = 1
                if stack:
                    stack[-1][0] += 1
            elif kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
                if len(stack) >= max_depth:
                    mark = event.start_mark
                    raise TextDataError(f"{origin}: nested deeper than {max_depth} levels (line "
                                        f"{mark.line + 1})", kind="limit", origin=origin)
                stack.append([1, event.anchor])
                if event.anchor is not None:
                    open_anchors.add(event.anchor)
            elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
                size, anchor = stack.pop()
                if anchor is not None:
                    anchors[anchor] = size
                    open_anchors.discard(anchor)
                if stack:
                    stack[-1][0] += size
            elif kind is yaml.AliasEvent:
                if event.anchor in open_anchors:
                    raise TextDataError(f"{origin}: alias *{clip(event.anchor, 40)} refers to a node that "
                                        "contains it (a recursive structure cannot be expanded)",
                                        kind="limit", origin=origin)
                size = anchors.get(event.anchor, 1)  # an undefined alias: the loader reports it
                added += size
                if added > max_alias_nodes:
                    raise TextDataError(f"{origin}: aliases expand to more than {max_alias_nodes} nodes "
                                        "(a YAML alias bomb?)", kind="limit", origin=origin)
                if stack:
                    stack[-1][0] += size
            elif kind is yaml.DocumentEndEvent:
                anchors.clear()  # anchors are per document, as PyYAML's composer keeps them
    finally:
        loader.dispose()


def load_yaml(data: str | bytes, origin: str = "<yaml>", *, max_bytes: int = MAX_YAML_BYTES,
              max_depth: int = MAX_DEPTH, max_alias_nodes: int = MAX_ALIAS_NODES) -> Any:
    """``yaml.safe_load`` (PyYAML's pure-Python loader, at any size) with the budgets above and typed
    errors."""
    if len(data) > max_bytes:
        raise TextDataError(f"{origin}: {len(data)} bytes is larger than the {max_bytes} accepted",
                            kind="limit", origin=origin)
    text = decode_utf8(data, origin)
    try:
        return _load(text, origin, max_depth, max_alias_nodes)
    except yaml.YAMLError as exc:
        raise TextDataError(f"{origin}: not valid YAML: {_one_line(exc)}", kind=type(exc).__name__,
                            origin=origin, detail=str(exc)) from None
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:  # a constructor refusing a value
        raise TextDataError(f"{origin}: unreadable YAML value: {_one_line(exc)}", kind=type(exc).__name__,
                            origin=origin, detail=str(exc)) from None


def _load(text: str, origin: str, max_depth: int, max_alias_nodes: int) -> Any:
    # The budget pass runs on libyaml's events (4-10x faster than PyYAML's parser); where libyaml stops at
    # an error, PyYAML's parser checks the text again (the two disagree on a few inputs).
    complete = check_yaml_events(text, origin, max_depth, max_alias_nodes, _C_LOADER or yaml.SafeLoader)
    if not complete and _C_LOADER is not None:
        check_yaml_events(text, origin, max_depth, max_alias_nodes, yaml.SafeLoader)
    loader = yaml.SafeLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_yaml_file(path: str | Path, what: str = "YAML file", *, max_bytes: int = MAX_YAML_BYTES,
                   max_depth: int = MAX_DEPTH, max_alias_nodes: int = MAX_ALIAS_NODES) -> Any:
    """:func:`load_yaml` of a file; ``what`` names it in messages ("IOSpec", "table"...)."""
    data = read_file(path, what, max_bytes)
    return load_yaml(data, f"{what} {clip(path)}", max_bytes=max_bytes, max_depth=max_depth,
                     max_alias_nodes=max_alias_nodes)


# ----- JSON ------------------------------------------------------------------------------------------

_OPEN = np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def json_depth(data: bytes) -> int:
    """Deepest bracket nesting of JSON bytes outside strings (vectorised; exact for valid JSON)."""
    arr = np.frombuffer(data, dtype=np.uint8)
    if arr.size == 0:
        return 0
    quote = arr == ord('"')
    if b"\\" in data:  # a quote is a delimiter unless an odd number of backslashes precedes it
        idx = np.arange(arr.size, dtype=np.int64)
        last_plain = np.maximum.accumulate(np.where(arr != ord("\\"), idx, -1))
        backslashes = idx - 1 - np.concatenate(([-1], last_plain[:-1]))
        quote &= backslashes % 2 == 0
    inside = np.cumsum(quote, dtype=np.int32) & 1  # odd count so far: in a string (or on its opening quote)
    delta = _OPEN[arr].astype(np.int32)
    delta[inside.astype(bool)] = 0
    return int(np.cumsum(delta, dtype=np.int32).max(initial=0))


def load_json(data: str | bytes, origin: str = "<json>", *, max_bytes: int = MAX_BYTES,
              max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` of UTF-8 text with a size and depth budget and typed errors."""
    if len(data) > max_bytes:
        raise TextDataError(f"{origin}: {len(data)} bytes is larger than the {max_bytes} accepted",
                            kind="limit", origin=origin)
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    text = decode_utf8(raw, origin).removeprefix("\ufeff")
    # Fewer opening brackets than the budget cannot nest deeper: skip the scan.
    depth = json_depth(raw) if raw.count(b"[") + raw.count(b"{") > max_depth else 0
    if depth > max_depth:
        raise TextDataError(f"{origin}: nested {depth} levels deep, more than the {max_depth} accepted",
                            kind="limit", origin=origin)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, the int digit limit
        raise TextDataError(f"{origin}: not JSON: {_one_line(exc)}", kind=type(exc).__name__, origin=origin,
                            detail=str(exc)) from None


def load_json_file(path: str | Path, what: str = "JSON file", *, max_bytes: int = MAX_BYTES,
                   max_depth: int = MAX_DEPTH) -> Any:
    """:func:`load_json` of a file; ``what`` names it in messages."""
    data = read_file(path, what, max_bytes)
    return load_json(data, f"{what} {clip(path)}", max_bytes=max_bytes, max_depth=max_depth)
