"""Label files: plain (line number = class id) or id-prefixed (``"0  background"`` / ``"0: background"``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from libredgetpu_ros.errors import InputError
from libredgetpu_ros.textdata import clip_repr

_PREFIXED = re.compile(r"^\s*(\d{1,18})\s*[:\s]\s*(\S.*?)\s*$")  # a longer number is a label, not an id
MAX_LABEL_FILE_BYTES = 16 << 20  # COCO's file is 1 KB, ImageNet's 30 KB
# Placeholder lines in plain files (COCO's retired ids); they keep their line number but get no label.
_GAP_MARKERS = frozenset({"n/a", ""})


def read_labels(path: str | Path) -> dict[int, str]:
    """Read a label file into ``{class_id: label}``.

    The format is detected from the content: if every non-empty line starts with an integer id followed by
    whitespace or a colon the ids are taken from the lines, otherwise the 0-based line number is the id.
    ``n/a`` and empty lines in plain files are gaps: their id is skipped, later ids are unaffected.
    """
    from libredgetpu_ros.paths import read_regular
    from libredgetpu_ros.textdata import clip

    path = Path(path)
    data = read_regular(path, "label file", MAX_LABEL_FILE_BYTES)  # a FIFO or a device: refused, never read
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"label file {clip(str(path))}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None
    return parse_labels(text, source=clip(str(path)))


def parse_labels(text: str, source: str = "<labels>") -> dict[int, str]:
    """Parse label file content (see :func:`read_labels`)."""
    lines = text.splitlines()
    non_empty = [line for line in lines if line.strip()]
    if not non_empty:
        raise InputError(f"label file {source}: no labels")
    matches = [_PREFIXED.match(line) for line in non_empty]
    if all(matches):
        labels: dict[int, str] = {}
        for line, match in zip(non_empty, matches, strict=True):
            class_id = int(match.group(1))
            if class_id in labels:
                raise InputError(f"label file {source}: id {class_id} appears twice (line {clip_repr(line)})")
            labels[class_id] = match.group(2)
        return labels
    return {i: line.strip() for i, line in enumerate(lines) if line.strip().lower() not in _GAP_MARKERS}


def label_of(labels: Mapping[int, str] | None, class_id: int) -> str:
    """The label of ``class_id``, or ``"class <id>"`` when there is none (no file, or a gap)."""
    if labels is not None and class_id in labels:
        return labels[class_id]
    return f"class {class_id}"


def load_labels(labels: str | Path | Mapping[int, str] | None) -> dict[int, str] | None:
    """Accept a path, an already-read mapping, or None (no labels)."""
    if labels is None:
        return None
    if isinstance(labels, Mapping):
        return dict(labels)
    return read_labels(labels)
