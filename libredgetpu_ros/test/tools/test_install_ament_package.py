"""tools/install_ament_package.py: the colcon layout `make setup` gives the venv (ros2 run/launch find it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .._helpers import load_helper

REPO = Path(__file__).resolve().parents[3]


def _tool():
    return load_helper(REPO / "tools" / "install_ament_package.py")


def test_layout_follows_the_package_and_every_console_script(tmp_path: Path) -> None:
    tool = _tool()
    pkg = tmp_path / "src" / "libredgetpu_ros"  # the distribution's name: its entry points are read
    (pkg / "launch").mkdir(parents=True)
    (pkg / "config").mkdir()
    (pkg / "package.xml").write_text("<package/>")
    (pkg / "launch" / "a.launch.py").write_text("")
    (pkg / "config" / "a.yaml").write_text("")
    (pkg / "config" / "notes.txt").write_text("")  # not a config pattern: not installed
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    scripts = tool.console_scripts("libredgetpu_ros")
    assert {"libredgetpu-ros", "perception_node", "control_node"} <= set(scripts)
    for name in scripts:
        (prefix / "bin" / name).write_text("#!/bin/sh\n")

    assert tool.install(pkg, prefix) == sorted(scripts)
    share = prefix / "share" / "libredgetpu_ros"
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / "libredgetpu_ros").is_file()
    assert (share / "package.xml").resolve() == pkg / "package.xml"
    assert sorted(p.name for p in (share / "launch").iterdir()) == ["a.launch.py"]
    assert sorted(p.name for p in (share / "config").iterdir()) == ["a.yaml"]
    lib = prefix / "lib" / "libredgetpu_ros"
    assert {p.name: p.resolve() for p in lib.iterdir()} == {n: prefix / "bin" / n for n in scripts}

    # A launch file added, one removed: the next run follows (no stale link, nothing copied).
    (pkg / "launch" / "a.launch.py").unlink()
    (pkg / "launch" / "b.launch.py").write_text("")
    tool.install(pkg, prefix)
    assert sorted(p.name for p in (share / "launch").iterdir()) == ["b.launch.py"]


@pytest.mark.ros  # the ROS layout `make setup` gives its venv (ros2 run / launch), not another Python's
def test_the_venv_holds_every_console_script_in_lib() -> None:
    # What `make setup` did to this venv: `ros2 run libredgetpu_ros X` works for every X of setup.py.
    tool = _tool()
    lib = Path(sys.prefix) / "lib" / "libredgetpu_ros"
    assert sorted(p.name for p in lib.iterdir()) == sorted(tool.console_scripts("libredgetpu_ros"))
    assert (Path(sys.prefix) / "share" / "libredgetpu_ros" / "launch" / "perception.launch.py").is_file()
