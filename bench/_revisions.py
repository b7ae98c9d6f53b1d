"""Older revisions of the package for interleaved before/after benchmark runs (--before, --baseline)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_at(rev: str, into: Path) -> Path:
    """The Python package as of git revision ``rev``, unpacked under ``into``; returns the PYTHONPATH entry
    that imports it (put it first: it must shadow the editable install of the working tree)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "libredgetpu_ros/libredgetpu_ros"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "libredgetpu_ros"
