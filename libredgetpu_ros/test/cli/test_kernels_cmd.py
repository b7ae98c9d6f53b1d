"""``libredgetpu-ros kernels build`` / ``status``: a build into an empty cache folder (the environment
variable pointed at a temporary folder) leaves exactly what a module's open needs there, so a fresh process
opening that family compiles nothing (numba's dispatcher statistics: hits for every specialization, no miss)
and its configure would log no notice; ``status --json`` before, after and once stale; no numba: nothing; a
bad ``--only`` is one ``error:`` line and exit 2. One cheap family (``image``, about a second of compile)
keeps the cost small; ``test/test_jit_warm_up.py`` builds every family before the modules it covers open."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from libredgetpu_ros.cli import main as cli

from libredgetpu_ros import jit

from .._helpers import CHILD_ENV, CLI, PYTHON

FAMILIES = [family.name for family in jit.FAMILIES]
# an empty folder: each family missing, but those whose warm-up opens another family's kernels first
EMPTY = {**dict.fromkeys(FAMILIES, "missing"), "flow": "needs flow_refine", "reservoir": "needs matmul"}
# A fresh process opening the image family as the robotics runner does (its warm_up), watched by jit and by
# numba's own per-dispatcher statistics.
OPEN = """
import json
from libredgetpu_ros import jit
from libredgetpu_ros.robotics import image_kernels
with jit.compile_watch() as watch:
    ok = image_kernels.warm_up()
stats = image_kernels.luma.stats
print(json.dumps({"ok": ok, "compiled": watch.families, "notice": watch.notice() if watch.families else "",
                  "hits": len(stats.cache_hits), "misses": len(stats.cache_misses),
                  "signatures": len(image_kernels.luma.signatures)}))
"""

# `kernels status --json` as after an upgrade that changed a kernel file (the stamp every entry carries)
STALE_STATUS = """
import sys
from libredgetpu_ros import jit
jit._kernel_files_stamp = lambda: b"another version of the kernel files"
from libredgetpu_ros.cli.main import main
sys.exit(main(["kernels", "status", "--json"]))
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    # XDG_CACHE_HOME elsewhere: a build that ignored the variable would write there, and be found out
    return {**env, **CHILD_ENV, "LIBREDGETPU_ROS_NUMBA_CACHE": str(tmp_path / "cache"),
            "XDG_CACHE_HOME": str(tmp_path / "xdg")}


def _run(argv: list[str], env: dict[str, str], code: str | None = None) -> dict:
    command = [*PYTHON, "-c", code] if code else [*CLI, *argv]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # the whole of stdout: one document


def _states(status: dict) -> dict[str, str]:
    return {row["family"]: row["state"] for row in status["families"]}


def test_build_one_family_then_a_fresh_process_opens_it_from_the_cache(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    env = _env(tmp_path)
    before = _run(["kernels", "status", "--json"], env)
    assert before["cache"] == str(tmp_path / "cache") and before["numba"]
    assert _states(before) == EMPTY
    # status adds no file (numba makes the folder and its subfolders, and removes its writability probe)
    assert not [path for path in (tmp_path / "cache").rglob("*") if not path.is_dir()]

    cold = _run([], env, OPEN)  # another folder first: a cold open compiles and says so
    assert cold["ok"] and cold["compiled"] == ["image"] and cold["misses"] == cold["signatures"] == 2
    assert "libredgetpu-ros kernels build" in cold["notice"]
    for path in (tmp_path / "cache").rglob("*"):
        if path.is_file():
            path.unlink()  # the build below starts from an empty folder again

    built = _run(["kernels", "build", "--only", "image", "--json", "--no-progress"], env)
    assert built["cache"] == str(tmp_path / "cache")
    [row] = built["families"]
    assert (row["family"], row["state"], row["also_compiled"]) == ("image", "compiled", [])
    assert row["seconds"] > 0 and row["cpu_seconds"] > 0
    assert not (tmp_path / "xdg").exists(), "the build wrote outside the cache folder it was given"

    warm = _run([], env, OPEN)
    # every specialization the open needs came from the build, none compiled: no notice at configure
    assert warm == {"ok": True, "compiled": [], "notice": "", "hits": 2, "misses": 0, "signatures": 2}

    after = _run(["kernels", "status", "--json"], env)
    assert _states(after) == {**EMPTY, "image": "cached"}  # --only: that one
    again = _run(["kernels", "build", "--only", "image", "--json", "--no-progress"], env)
    assert again["families"][0]["state"] == "cached"
    # A kernel file changed since (an upgrade): the entries are there but no longer load.
    stale = _run([], env, STALE_STATUS)
    assert _states(stale) == {**EMPTY, "image": "stale"}


def test_build_without_numba_has_nothing_to_build(monkeypatch, capsys) -> None:
    monkeypatch.setattr(jit, "_available", False)
    assert cli.main(["kernels", "build", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["numba"] is None and out["families"] == [] and "nothing to build" in out["message"]
    assert cli.main(["kernels", "build"]) == 0
    assert "nothing to build" in capsys.readouterr().out
    assert cli.main(["kernels", "status", "--json"]) == 0
    assert _states(json.loads(capsys.readouterr().out)) == dict.fromkeys(FAMILIES, "no numba")


def test_unknown_family_is_one_error_line_and_exit_2(capsys) -> None:
    assert cli.main(["kernels", "build", "--only", "image", "--only", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("error: --only nope: no such kernel family") and "image" in line


def test_help_names_every_family(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(["kernels", "build", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in FAMILIES) and "--only FAMILY" in text and "--json" in text
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["kernels", "--help"])
    text = capsys.readouterr().out
    assert "build" in text and "status" in text and "libredgetpu-ros kernels build" in text


def test_a_family_that_fails_to_compile_is_reported_and_the_rest_built(monkeypatch, capsys, tmp_path) -> None:
    """A compile error (numba raises many types) is that family's row and exit 1, not a traceback that leaves
    the families after it unbuilt."""
    monkeypatch.setenv("LIBREDGETPU_ROS_NUMBA_CACHE", str(tmp_path / "cache"))
    built = []

    def warm_up(name: str) -> bool:
        if name == "image":
            raise RuntimeError("numba said no\nwith a second line")
        built.append(name)
        return True

    monkeypatch.setattr(jit, "warm_up", warm_up)
    assert cli.main(["kernels", "build", "--no-progress", "--only", "image", "--only", "resize"]) == 1
    captured = capsys.readouterr()
    assert built == ["resize"]
    assert "image        failed" in captured.out and "RuntimeError: numba said no" in captured.out
    assert captured.err.splitlines() == ["error: 1 kernel family did not build: image"]
    assert cli.main(["kernels", "build", "--json", "--no-progress", "--only", "image"]) == 1
    [row] = json.loads(capsys.readouterr().out)["families"]
    assert row["state"] == "failed" and row["error"].startswith("RuntimeError: numba said no")


def _files(folder: Path) -> dict[Path, float]:
    return {path: path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()}


def test_status_names_the_family_missing_not_the_one_whose_warm_up_uses_it(tmp_path, monkeypatch) -> None:
    """flow's warm-up runs image's luma: with image's entries gone, flow's own (built) entries are not the
    cause; flow says it needs image, image says missing, and status leaves the folder's files as they were."""
    pytest.importorskip("numba")
    env = _env(tmp_path)
    built = _run(["kernels", "build", "--only", "flow", "--json", "--no-progress"], env)
    assert built["families"][0]["state"] == "compiled"
    monkeypatch.setenv("LIBREDGETPU_ROS_NUMBA_CACHE", env["LIBREDGETPU_ROS_NUMBA_CACHE"])
    assert _states(_run(["kernels", "status", "--json"], env))["flow"] == "cached"
    image_files = jit.cache_files("image")
    assert image_files and jit.cache_files("flow")
    for path in image_files:
        path.unlink()
    files = _files(tmp_path / "cache")
    status = _run(["kernels", "status", "--json"], env)
    rows = {row["family"]: row for row in status["families"]}
    assert (rows["image"]["state"], rows["image"]["needs"]) == ("missing", None)
    assert (rows["flow"]["state"], rows["flow"]["needs"]) == ("needs image", "image")
    assert rows["flow"]["index_files"] > 0 and rows["flow_refine"]["state"] == "cached"
    assert _files(tmp_path / "cache") == files
    done = subprocess.run([*CLI, "kernels", "status"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert lines["flow"].split()[1:3] == ["needs", "image"] and lines["image"].split()[1] == "missing"
