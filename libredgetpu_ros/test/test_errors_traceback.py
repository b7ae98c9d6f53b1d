"""``errors.traceback_text``: the one text the nodes log for an exception nothing foresaw."""

from __future__ import annotations

from pathlib import Path

from libredgetpu_ros.errors import traceback_text

PACKAGE = Path(__file__).resolve().parents[1] / "libredgetpu_ros"


def _raise_chained() -> None:
    try:
        {}["missing"]
    except KeyError as exc:
        raise RuntimeError("handler failed") from exc


def test_traceback_text_holds_the_chain_and_no_trailing_newline() -> None:
    try:
        _raise_chained()
    except RuntimeError as exc:
        text = traceback_text(exc)
    assert text.startswith("Traceback (most recent call last):")
    assert "KeyError: 'missing'" in text and "direct cause of the following exception" in text
    assert text.endswith("RuntimeError: handler failed") and "_raise_chained" in text


def test_the_ros_layer_writes_it_once() -> None:
    """Every module of the ROS layer logs a traceback through the helper: no inline copy left."""
    inline = '"".join(traceback.format_exception('
    found = {str(p.relative_to(PACKAGE)): p.read_text().count(inline)
             for p in (PACKAGE / "ros").rglob("*.py") if inline in p.read_text()}
    assert not found, found
    assert "format_exc()" not in (PACKAGE / "ros" / "lifecycle.py").read_text()
