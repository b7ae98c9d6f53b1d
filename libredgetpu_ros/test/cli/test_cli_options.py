"""``--json`` on every subcommand that does work and ``--no-progress`` on every one that draws a progress bar,
found by walking the parser itself (a new subcommand without them fails here), and the ``--json`` output of
the commands automation drives (make-bag, process-bag, bringup, replay; models in test/models) parsing as
one JSON document with nothing else on stdout (cli/output.py). Issue 33: process-bag, make-bag, replay and
models fetch had no ``--json``; process-bag / make-bag no ``--no-progress``."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
from pathlib import Path

import numpy as np
import pytest
from libredgetpu_ros.cli import main as cli

CLASSIFY = "classify/mobilenet_v1_0.25_128_quant_edgetpu.tflite"


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaves(sub, (*path, name))


LEAVES = {" ".join(path): parser for path, parser in _leaves(cli.build_parser())}
MODULES = dict(cli.SUBCOMMANDS)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_the_walk_finds_every_subcommand() -> None:
    assert {path.split()[0] for path in LEAVES} == set(MODULES)
    assert {"process-bag", "make-bag", "replay", "models fetch", "models import", "bringup"} <= set(LEAVES)


@pytest.mark.parametrize("command", sorted(LEAVES))
def test_every_subcommand_has_json(command: str) -> None:
    assert "--json" in _options(LEAVES[command]), f"`libredgetpu-ros {command}` has no --json"


@pytest.mark.parametrize("command", sorted(LEAVES))
def test_every_subcommand_drawing_progress_has_no_progress(command: str) -> None:
    """A command whose module passes a ``progress`` setting on (a tqdm bar) must let scripts turn it off."""
    source = inspect.getsource(importlib.import_module(f"libredgetpu_ros.cli.{MODULES[command.split()[0]]}"))
    draws = "progress=" in source and (command.split()[0] not in ("models", "kernels")
                                       or command in ("models fetch", "kernels build"))
    assert ("--no-progress" in _options(LEAVES[command])) == draws, command


def _frames(folder: Path, n: int = 3) -> Path:
    import cv2

    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        cv2.imwrite(str(folder / f"{i:02d}.png"), rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    return folder


def _json_out(capsys: pytest.CaptureFixture[str]) -> dict:
    out = capsys.readouterr().out
    return json.loads(out)  # the whole of stdout: one document


def test_make_bag_and_process_bag_json(tmp_path: Path, fixture_path, capsys) -> None:
    import yaml

    bag = tmp_path / "cam_bag"
    assert cli.main(["make-bag", "--images", str(_frames(tmp_path / "frames")), "--out", str(bag),
                     "--rate", "5", "--json", "--no-progress"]) == 0
    made = _json_out(capsys)
    assert (made["path"], made["frames"], made["topic"], made["rate_hz"]) == (str(bag), 3, "/image_raw", 5.0)
    assert made["duration_s"] == pytest.approx(0.4)

    config = tmp_path / "classify.yaml"
    config.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "model": str(fixture_path(CLASSIFY)), "backend": "cpu", "task": "classify"}}}))
    out = tmp_path / "results_bag"
    assert cli.main(["process-bag", str(bag), str(out), "--config", str(config), "--json",
                     "--no-progress"]) == 0
    summary = _json_out(capsys)
    assert (summary["frames"], summary["processed"], summary["failed"]) == (3, 3, 0)
    assert summary["output"] == str(out) and summary["topics"] == ["/image_raw"] and summary["written"] >= 3


def test_bringup_check_json_lists_nodes_and_remappings(tmp_path: Path, capsys) -> None:
    config = tmp_path / "robot.yaml"
    config.write_text("nodes:\n  - type: perception\n    namespace: front\n    remappings:\n"
                      "      image_raw: /front_camera/color/image_raw\n    parameters:\n"
                      "      model: posenet_mobilenet_v1_075_481_641\n      backend: cpu\n")
    assert cli.main(["bringup", str(config), "--check", "--json"]) == 0
    doc = _json_out(capsys)
    assert doc["valid"] is True
    assert doc["nodes"] == [{"type": "perception", "name": "perception", "namespace": "front",
                             "parameters": ["backend", "model"],
                             "remappings": {"image_raw": "/front_camera/color/image_raw"}}]


@pytest.mark.ros
def test_replay_json(ros_env, tmp_path: Path, capsys) -> None:
    bag = tmp_path / "cam_bag"
    assert cli.main(["make-bag", "--images", str(_frames(tmp_path / "frames", 2)), "--out", str(bag),
                     "--rate", "20", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli.main(["replay", str(bag), "--json"]) == 0
    doc = _json_out(capsys)
    assert (doc["published"], doc["interrupted"], doc["unreadable"]) == (2, False, 0)


@pytest.mark.ros
def test_bringup_json_run_prints_one_document_after_stopping(ros_env, tmp_path: Path, fixture_path) -> None:
    """``bringup --json`` (run, not --check): progress lines on stderr, the JSON summary alone on stdout."""
    import subprocess
    import sys

    config = tmp_path / "robot.yaml"
    config.write_text(f"nodes:\n  - type: perception\n    namespace: cam\n    parameters:\n"
                      f"      model: {fixture_path(CLASSIFY)}\n      backend: cpu\n")
    done = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", "bringup", str(config),
                           "--duration", "2", "--json"], env=ros_env.env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["exit_code"] == 0 and [n["namespace"] for n in doc["nodes"]] == ["cam"]
    assert "/cam/perception: active" in done.stderr and "stopping" in done.stderr
