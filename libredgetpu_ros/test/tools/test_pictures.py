"""tools/pictures.py (`make pictures`): the committed docs/images/ are what the code draws today.

Every picture is rendered again (node pictures from the fixtures on the CPU backend, charts from
bench/results/) and compared with the committed file (photos through the same JPEG encoder): same size, and
pixel values within a small tolerance (rasterisation and LiteRT's float rounding may differ by a few levels
on a few pixels; a moved box, another skeleton or a changed bench figure changes far more). A failure says
to run `make pictures`. Also: the README and the docs show every picture, and `--only NAME --json` renders
one and says what it wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from .._helpers import load_helper

REPO = Path(__file__).resolve().parents[3]
MEAN_LEVELS = 1.0  # mean absolute difference, in 8-bit levels
CHANGED_FRACTION = 0.01  # share of pixels differing by more than 16 levels


def pictures():
    return load_helper(REPO / "tools" / "pictures.py")


def _locked_matplotlib() -> str:
    for line in (REPO / "requirements.lock.txt").read_text().splitlines():
        if line.startswith("matplotlib=="):
            return line.split("==", 1)[1].split()[0]
    return ""


@pytest.mark.parametrize("name", pictures().names())
def test_committed_picture_is_current(name: str) -> None:
    import matplotlib

    # the bench charts are matplotlib's drawing; the other Pythons' lane may hold an older matplotlib
    if name.startswith("bench_") and matplotlib.__version__ != _locked_matplotlib():
        pytest.skip(f"the charts were drawn with matplotlib {_locked_matplotlib()}, this is "
                    f"{matplotlib.__version__} (it draws text and lines a few pixels apart)")
    tool = pictures()
    committed = tool.OUT / tool.file_name(name)
    assert committed.is_file(), f"{committed} missing: run `make pictures`"
    old = tool.decode(committed.read_bytes())
    new = tool.decode(tool.encode(name, tool.render(name)))  # through the same encoder (JPEG for photos)
    assert old.shape == new.shape, f"{name}: {old.shape} committed, {new.shape} now: run `make pictures`"
    diff = np.abs(old.astype(np.int16) - new.astype(np.int16))
    mean, changed = float(diff.mean()), float((diff.max(axis=2) > 16).mean())
    assert mean <= MEAN_LEVELS and changed <= CHANGED_FRACTION, (
        f"{name}: differs from the committed picture (mean {mean:.2f} levels, {changed:.2%} of pixels by "
        f"more than 16): run `make pictures`")


def test_a_changed_picture_is_noticed() -> None:
    """The comparison's tolerance is far below what a real change makes: one detection box moved by 5 px."""
    tool = pictures()
    image = tool.render("detect")
    moved = np.roll(image, 5, axis=1)
    diff = np.abs(image.astype(np.int16) - moved.astype(np.int16))
    assert float(diff.mean()) > MEAN_LEVELS or float((diff.max(axis=2) > 16).mean()) > CHANGED_FRACTION


def test_docs_show_every_picture() -> None:
    tool = pictures()
    documents = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    shown = "\n".join(p.read_text(encoding="utf-8") for p in documents)
    for name in tool.names():
        file = tool.file_name(name)
        assert f"images/{file}" in shown, f"docs/images/{file} is in no document"


def test_only_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tool = pictures()
    assert tool.main(["--out", str(tmp_path), "--only", "bench_detect", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [entry] = report["written"]
    assert entry["name"] == "bench_detect" and Path(entry["path"]) == tmp_path / "bench_detect.png"
    assert cv2.imread(entry["path"]).shape == (entry["height"], entry["width"], 3)
    with pytest.raises(SystemExit):
        tool.main(["--only", "no_such_picture"])
