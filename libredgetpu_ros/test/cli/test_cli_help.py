"""``libredgetpu-ros --help`` and the subcommands' ``--help`` show examples a user can copy: every example
line is a command the parser accepts, and the repository paths it names exist (from the repository root)."""

from __future__ import annotations

import importlib
import shlex
from pathlib import Path

import pytest
from libredgetpu_ros.cli import main as cli

ROOT = Path(__file__).resolve().parents[3]
PLACEHOLDERS = ("COMMAND", "MODULE")  # "libredgetpu-ros COMMAND --help": a pointer, not a command


def _examples() -> list[tuple[str, str]]:
    found = [("libredgetpu-ros", line) for line in cli.EXAMPLES]
    for name, module_name in cli.SUBCOMMANDS:
        module = importlib.import_module(f"libredgetpu_ros.cli.{module_name}")
        found += [(name, line) for line in getattr(module, "EXAMPLES", ())]
    return found


def test_top_level_help_lists_first_hour_examples(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.build_parser().parse_args(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "libredgetpu-ros doctor" in out and "models import DIR" in out
    assert "ros2 launch libredgetpu_ros perception.launch.py" in out  # where the nodes are


@pytest.mark.parametrize("command", ["infer", "models", "doctor", "bringup", "robotics"])
def test_subcommand_help_shows_its_examples(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([command, "--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and f"libredgetpu-ros {command} " in out


@pytest.mark.parametrize(("where", "line"), _examples(), ids=lambda v: v)
def test_every_example_parses(where: str, line: str) -> None:
    argv = shlex.split(line.split("  #", 1)[0])
    assert argv[0] == "libredgetpu-ros", f"{where}: {line}"
    if any(p in argv for p in PLACEHOLDERS):
        return
    for arg in argv[1:]:
        if arg.startswith("libredgetpu_ros/"):
            assert (ROOT / arg).exists(), f"{where}: {arg} does not exist from the repository root"
    try:
        cli.build_parser().parse_args(argv[1:])
    except SystemExit as exc:
        pytest.fail(f"{where}: argparse refused {line!r} (exit {exc.code})")


def test_help_defaults_written_out_match_the_constants(capsys: pytest.CaptureFixture[str]) -> None:
    # Kept as literals so --help does not import the modules behind them: they must not drift.
    from libredgetpu_ros.models.download import DEADLINE_S

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["models", "fetch", "--help"])
    assert f"(default {DEADLINE_S:g};" in " ".join(capsys.readouterr().out.split())


def test_robotics_flow_defaults_are_the_modules() -> None:
    # The CLI writes OpticalFlow's defaults out (robotics.flow is not imported for --help): same values.
    import inspect

    from libredgetpu_ros.robotics.flow import OpticalFlow

    args = cli.build_parser().parse_args(["robotics", "flow", "--model", "gabor_64x64_p4", "x.png"])
    defaults = inspect.signature(OpticalFlow.__init__).parameters
    for name in ("mode", "search_range", "temperature", "pool_factor", "min_texture", "min_confidence",
                 "min_match"):
        assert getattr(args, name) == defaults[name].default, name
    assert (not args.no_refine) == defaults["refine"].default


def test_robotics_looming_defaults_are_the_modules() -> None:
    import inspect

    from libredgetpu_ros.robotics.looming import LoomingDetector

    args = cli.build_parser().parse_args(["robotics", "looming", "--model", "looming_64x64_3x3", "x.png"])
    defaults = inspect.signature(LoomingDetector.__init__).parameters
    assert (args.ttc_window, args.ttc_min_samples, args.contact_tau, args.ttc_mode, args.max_gap) == tuple(
        defaults[name].default for name in ("window", "min_samples", "contact_tau", "ttc_mode", "max_gap_s"))


def test_robotics_spot_and_pattern_modes_are_the_modules() -> None:
    import inspect

    from libredgetpu_ros.robotics.pattern import PatternTracker
    from libredgetpu_ros.robotics.spot import SpotTracker

    spot = cli.build_parser().parse_args(["robotics", "spot", "--model", "color_red_64x64", "x.png"])
    assert spot.mode == inspect.signature(SpotTracker.__init__).parameters["mode"].default
    pattern = cli.build_parser().parse_args(["robotics", "pattern", "--model", "pattern_64x64_8x8_1ch",
                                             "--template", "p.png", "x.png"])
    assert pattern.mode == inspect.signature(PatternTracker.__init__).parameters["mode"].default


def test_robotics_reservoir_defaults_are_the_configs() -> None:
    import dataclasses

    from libredgetpu_ros.robotics.reservoir import ReservoirConfig

    args = cli.build_parser().parse_args(["robotics", "reservoir", "fit", "s.csv", "--out", "r.npz"])
    defaults = {f.name: f.default for f in dataclasses.fields(ReservoirConfig)}
    for name in ("seed", "spectral_radius", "input_scaling", "leak_rate", "activation", "washout", "ridge",
                 "passes"):
        assert getattr(args, name) == defaults[name], name
