"""Hostile requests for any ROS 2 service type, built from the type's own fields (never a hand list).

``hostile_paths(folder)`` makes the special files a path field may name: a FIFO, a symlink to it, a symlink
to a character device (safe as a write target too: a write replaces the link, never the device), a folder,
a 1.5 GiB sparse file, a garbage file, a missing file and a 100,000-character path. ``hostile_requests(
srv_type, paths)`` yields ``(label, request)``: each field of the request set in turn to each hostile value
of its type (the other fields at their defaults), then every field hostile at once. Values per type:

- float64: NaN, +-inf, +-1e308, the smallest subnormal; float32: NaN, +-inf, +-3.4e38;
- integers: the type's minimum and maximum, 0;
- strings: 100,000 characters, empty, control and bidi characters, every hostile path;
- sequences: empty, one value, 262,144 values, all NaN, the type's extreme.

Used by ``test_services_hostile.py`` (each node's services across processes) and the fuzz target
``service_requests`` (``test/fuzz/service_targets.py``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LONG = "x" * 100_000
_INT_RANGES = {f"{sign}int{bits}": ((0, (1 << bits) - 1) if sign else (-(1 << bits - 1), (1 << bits - 1) - 1))
               for sign in ("", "u") for bits in (8, 16, 32, 64)}
_INT_RANGES |= {k: (0, 255) for k in ("octet", "byte", "char")}
_FLOATS = {"double": [float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324],
           "float": [float("nan"), float("inf"), float("-inf"), 3.4e38, -3.4e38]}
_SEQUENCE = re.compile(r"^sequence<([a-z0-9]+)(?:, \d+)?>$")


def hostile_paths(folder: Path) -> dict[str, str]:
    """Special files in ``folder`` (made fresh), by kind."""
    folder.mkdir(parents=True, exist_ok=True)
    fifo = folder / "fifo.npz"
    os.mkfifo(fifo)
    bag = folder / "fifo_bag"  # a bag folder whose data file is a FIFO (issue 30: ~/fit hung on it)
    bag.mkdir()
    os.mkfifo(bag / "x.mcap")
    link = folder / "link_to_fifo.npz"
    link.symlink_to(fifo)
    device = folder / "link_to_zero.npz"
    device.symlink_to("/dev/zero")
    sparse = folder / "sparse.npz"
    with sparse.open("wb") as handle:
        handle.truncate(3 << 29)  # 1.5 GiB of holes: a reader that does not check sizes reads it all
    garbage = folder / "garbage.npz"
    garbage.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 4)
    return {"fifo": str(fifo), "fifo_bag": str(bag), "link_to_fifo": str(link), "device": str(device),
            "folder": str(folder), "sparse_1.5GiB": str(sparse), "garbage": str(garbage),
            "missing": str(folder / "missing" / "x.npz"), "long_path": str(folder / ("y" * 100_000)),
            "proc": "/proc/self/status"}


def _strings(paths: dict[str, str]) -> list[tuple[str, str]]:
    return [("100k chars", LONG), ("empty", ""), ("control chars", "a\n\r\t\x01\x7f\u202e\u200bz"),
            *((f"path {kind}", path) for kind, path in paths.items())]


def values_for(ftype: str, paths: dict[str, str]) -> list[tuple[str, Any]]:
    """(label, value) pairs of hostile values for a field of rosidl type ``ftype``; [] for nested types."""
    if ftype in _FLOATS:
        return [(repr(v), v) for v in _FLOATS[ftype]]
    if ftype in _INT_RANGES:
        low, high = _INT_RANGES[ftype]
        return [(str(v), v) for v in sorted({low, high, 0})]
    if ftype == "boolean":
        return [("true", True)]
    if ftype in ("string", "wstring") or ftype.startswith("string<"):
        return _strings(paths)
    match = _SEQUENCE.match(ftype)
    if match:
        inner = match.group(1)
        if inner in _FLOATS:
            extreme = _FLOATS[inner][3]
            return [("[]", []), ("[1 value]", [1.0]), ("[262144 values]", [0.5] * (1 << 18)),
                    ("[NaN x 64]", [float("nan")] * 64), ("[extreme x 64]", [extreme] * 64)]
        if inner in _INT_RANGES:
            top = _INT_RANGES[inner][1]
            return [("[]", []), ("[262144 values]", [1] * (1 << 18)), ("[max x 64]", [top] * 64)]
        if inner == "string":
            return [("[]", []), ("[100k chars x 8]", [LONG] * 8)]
    return []  # nested messages: left at their defaults


def hostile_requests(srv_type: Any, paths: dict[str, str],
                     base: dict[str, Any] | None = None) -> Iterator[tuple[str, Any]]:
    """(label, request) for ``srv_type``: the default request, one hostile field at a time (the others at
    their defaults, and again at ``base``'s values when given: a request that passes the first checks, so
    the hostile field reaches the deeper ones), then all fields hostile together."""
    yield "default request", srv_type.Request()
    fields = srv_type.Request.get_fields_and_field_types()
    choices = {name: values_for(ftype, paths) for name, ftype in fields.items()}
    for others in ({}, base) if base else ({},):
        for name, values in choices.items():
            for label, value in values:
                yield (f"{name}={label}" + (" (other fields good)" if others else ""),
                       srv_type.Request(**{**others, name: value}))
    width = max((len(v) for v in choices.values()), default=0)
    for i in range(width):  # every field hostile at once, i-th value of each
        together = {name: values[i % len(values)] for name, values in choices.items() if values}
        if together:
            yield ("all: " + ", ".join(f"{n}={lab}" for n, (lab, _) in together.items()),
                   srv_type.Request(**{n: v for n, (_, v) in together.items()}))
