"""Every command a user types from README.md and docs/*.md is checked against what the repository really has.

Commands come from the fenced ``bash``/``sh`` blocks (continuation lines joined, comments dropped, two
commands written side by side split), from inline code in prose, and from what a user also copies: the
indented command blocks and inline code of the launch files' docstrings and the comments of config/*.yaml.
Each kind is checked the way it would fail for a user:

- ``libredgetpu-ros SUB ARGS``: SUB exists and argparse accepts ARGS (flags, choices); every SUB named is run
  once for real with ``--help``; the read-only ones (``models list``, ``doctor --json``) run for real;
- ``ros2 launch libredgetpu_ros FILE k:=v``: FILE is an installed launch file and every ``k`` is one of its
  declared launch arguments (read from its LaunchDescription);
- ``ros2 run libredgetpu_ros EXE``: EXE is a console script of the package;
- ``ros2 VERB``: the verb exists in this ROS install, or the block is under a heading about a robot / apt
  install, or the line's comment says it is "not in the venv";
- ``make TARGET``: the Makefile has the target; ``python -m MOD``: MOD imports; ``source``/``tools/...``,
  ``--params-file`` and ``params_file:=`` paths: exist relative to the repository root (where the README runs
  its commands), unless they are placeholders or paths of a colcon workspace / another machine.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PKG = ROOT / "libredgetpu_ros"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# What a user also reads and copies: the launch files' docstrings and the configs' comments.
EMBEDDED = [*sorted((PKG / "launch").glob("*.launch.py")), *sorted((PKG / "config").glob("*.yaml"))]
SHELL_FENCES = ("```bash", "```sh", "```shell", "```console")
COMMAND_WORDS = ("libredgetpu-ros", ".venv/bin/libredgetpu-ros", "ros2", "make", "python", "source",
                 "tools/", ".venv/bin/python", "rviz2")
# Places that exist only on a robot / in a colcon workspace / are the user's own: not checked for existence.
FOREIGN = ("install/", "/opt/", "~", "$", "<", "src/", "my_", "/tmp", "out/", "build/", "*", "/etc/", "/dev/",
           "http", "ws/", "/path", "DIR", "FILE", "PATH", "MODEL", "NAME")
# Whole words: "robotics" (docs/robotics.md's headings) or "adapt" must not exempt a section.
ROBOT_SECTION = re.compile(r"\brobots?\b|\bapt\b|colcon|ros 2 from|other machine", re.IGNORECASE)
# Inline code that is a whole command: `libredgetpu-ros models fetch NAME`, `ros2 launch libredgetpu_ros ...`.
INLINE = re.compile(r"`((?:libredgetpu-ros|ros2 (?:launch|run) libredgetpu_ros|make) [^`]+)`")
REPO_DIRS = ("config/", "tools/", "libredgetpu_ros/", "docs/", "bench/")
READ_ONLY_RUNS = (["models", "list"], ["doctor", "--json"], ["--help"])


@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    heading: str
    argv: tuple[str, ...]
    note: str = ""  # the line's trailing comment

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {' '.join(self.argv)}"


def _split_side_by_side(line: str) -> list[str]:
    parts = re.split(r"\s{3,}(?=(?:ros2|libredgetpu-ros|make|source|python)\b)", line)
    return [p for p in (s.strip() for s in parts) if p]


def _as_markdown(doc: Path) -> list[str]:
    """``doc``'s lines as Markdown, one for one (line numbers kept): a launch file's module docstring with its
    indented command blocks fenced (the blank lines around them become the fences), a YAML file's comments as
    prose; everything else blank."""
    lines = doc.read_text().splitlines()
    if doc.suffix == ".md":
        return lines
    if doc.suffix == ".yaml":
        return [line.lstrip()[1:].strip() if line.lstrip().startswith("#") else "" for line in lines]
    out = [""] * len(lines)
    quotes = [i for i, line in enumerate(lines) if '"""' in line][:2]
    if len(quotes) < 2 or quotes[0] > 2:
        return out
    start, end = quotes
    out[start:end] = [lines[start].split('"""', 1)[1], *lines[start + 1:end]]
    block = False
    for i in range(start, end):
        indented = out[i].startswith("    ") and out[i].strip().startswith(COMMAND_WORDS)
        if indented and not block and i > start and not out[i - 1].strip():
            out[i - 1], block = "```bash", True
        elif block and not out[i].startswith("    "):
            out[i], block = ("```" if not out[i].strip() else out[i]), False
    return out


def commands() -> list[Command]:
    found: list[Command] = []
    for doc in [*DOCS, *EMBEDDED]:
        heading, fence, pending, start = "", False, "", 0
        for number, raw in enumerate(_as_markdown(doc), 1):
            if raw.startswith("#") and not fence:
                heading = raw.lstrip("#").strip()
            if raw.startswith("```"):
                fence = not fence and raw.strip().startswith(SHELL_FENCES)
                continue
            if not fence:
                for span in INLINE.findall(raw):
                    try:
                        argv = tuple(shlex.split(span))
                    except ValueError:
                        continue
                    found.append(Command(str(doc.relative_to(ROOT)), number, heading, argv, "inline"))
                continue
            text, _, note = raw.partition(" #") if not raw.lstrip().startswith("#") else ("", "", "")
            text = text.rstrip()
            if text.endswith("\\"):
                pending, start = pending + text[:-1] + " ", start or number
                continue
            text, first = pending + text, start or number
            pending, start = "", 0
            for part in _split_side_by_side(text.strip().removeprefix("$ ")):
                for piece in re.split(r"\s*(?:&&|;|&$)\s*", part):
                    try:
                        argv = tuple(shlex.split(piece))
                    except ValueError:
                        continue
                    if argv and argv[0].startswith(COMMAND_WORDS):
                        found.append(Command(str(doc.relative_to(ROOT)), first, heading, argv, note.strip()))
    return found


ALL = commands()


def of(kind: str) -> list[Command]:
    return [c for c in ALL if c.argv[0] == kind or c.argv[0].endswith("/" + kind)]


def foreign(path: str) -> bool:
    return any(marker in path for marker in FOREIGN)


def installed(path: str) -> Path:
    """``path`` from the repository root; ``.venv/...`` in the venv running the tests (``make setup``'s, or
    the one ``LIBREDGETPU_ROS_VENV`` names for a worktree that has none of its own)."""
    if path.startswith(".venv/"):
        return Path(sys.prefix) / path.removeprefix(".venv/")
    return ROOT / path


@cache
def launch_arguments(launch_file: str) -> set[str]:
    from launch.launch_description_sources import get_launch_description_from_python_launch_file

    # The launch files find their configs through the ament index; the venv is an ament prefix (make setup).
    os.environ.setdefault("AMENT_PREFIX_PATH", sys.prefix)
    description = get_launch_description_from_python_launch_file(str(PKG / "launch" / launch_file))
    return {a.name for a in description.get_launch_arguments()}


@cache
def console_scripts() -> set[str]:
    text = (PKG / "setup.py").read_text()
    return set(re.findall(r'"([\w-]+)\s*=\s*libredgetpu_ros[\w.]*:\w+"', text))


@cache
def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))


@cache
def ros2_verbs() -> set[str]:
    from importlib.metadata import entry_points

    return {e.name for e in entry_points(group="ros2cli.command")}


def test_readme_links_every_document() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [d.name for d in DOCS[1:] if f"](docs/{d.name})" not in readme]
    assert not missing, f"README.md's documentation table lacks {missing}"


def test_docs_have_commands() -> None:
    assert len(ALL) > 30 and of("libredgetpu-ros") and of("ros2") and of("make")


@pytest.mark.parametrize("command", of("libredgetpu-ros"), ids=str)
def test_libredgetpu_ros_arguments_parse(command: Command) -> None:
    from libredgetpu_ros.cli.main import SUBCOMMANDS, build_parser

    for arg in (a.strip("[]") for a in command.argv[2:]):  # repository paths, in prose too
        if arg.startswith(REPO_DIRS) and not foreign(arg):
            assert (ROOT / arg).exists(), f"{command}: {arg} does not exist from the repository root"
    if command.note == "inline":  # prose naming a command ("`libredgetpu-ros mgk inspect|extract`")
        names = command.argv[1].split("|") if len(command.argv) > 1 else []
        assert all(n in dict(SUBCOMMANDS) for n in names if n), f"{command}: no such subcommand"
        return
    # A synopsis ("[--json]", "a|b", "[--cpu | --labels]", "N") is checked as the command with every option
    # given, first alternatives, and 1 for an upper-case placeholder of a typed value.
    text = re.sub(r"\s*\|\s*[^\]\s]+", "", " ".join(command.argv[1:]))
    argv = [a.strip("[]") for a in text.split() if a not in ("...", "&")]
    argv = ["1" if re.fullmatch(r"[A-Z]{1,2}", a) else a for a in argv]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code != 0:  # --help
            pytest.fail(f"{command}: argparse refused it (exit {exc.code})")


def test_every_named_subcommand_runs_its_help() -> None:
    names = sorted({name for c in of("libredgetpu-ros") if len(c.argv) > 1 and not c.argv[1].startswith("-")
                    for name in c.argv[1].split("|") if name})
    runs = [[name, "--help"] for name in names] + [list(r) for r in READ_ONLY_RUNS]
    for argv in runs:
        done = subprocess.run([sys.executable, "-m", "libredgetpu_ros.cli.main", *argv], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode in (0, 1), f"libredgetpu-ros {' '.join(argv)}: {done.stderr[-500:]}"


@pytest.mark.ros  # the ros2 CLI's verbs, launch files and executables of this install
@pytest.mark.parametrize("command", [c for c in of("ros2") if len(c.argv) > 1], ids=str)
def test_ros2_commands(command: Command) -> None:
    verb = command.argv[1]
    if verb not in ros2_verbs():
        assert ROBOT_SECTION.search(command.heading) or "not in the venv" in command.note, (
            f"{command}: `ros2 {verb}` is not in this install (verbs: {sorted(ros2_verbs())}) and the "
            f"section '{command.heading}' is not about a robot's ROS install")
        return
    args = command.argv[2:]
    if verb in ("launch", "run") and args and args[0] == "libredgetpu_ros" and len(args) > 1:
        if verb == "launch":
            declared = launch_arguments(args[1])
            for arg in args[2:]:
                if ":=" in arg:
                    name = arg.split(":=", 1)[0]
                    assert name in declared, f"{command}: {args[1]} declares no argument {name!r}: {declared}"
        else:
            assert args[1] in console_scripts(), f"{command}: no executable {args[1]!r}"
    for i, arg in enumerate(args):
        path = args[i + 1] if arg == "--params-file" and i + 1 < len(args) else (
            arg.split(":=", 1)[1] if arg.startswith("params_file:=") else None)
        if path and not foreign(path) and not ROBOT_SECTION.search(command.heading):
            assert installed(path).exists(), f"{command}: {path} does not exist from the repository root"


@pytest.mark.parametrize("command", of("make"), ids=str)
def test_make_targets(command: Command) -> None:
    targets = [a for a in command.argv[1:] if "=" not in a and not a.startswith("-")]
    for target in targets:
        assert target in make_targets(), f"{command}: the Makefile has no target {target!r}"


@pytest.mark.parametrize("command", [c for c in ALL if "-m" in c.argv and "python" in c.argv[0]], ids=str)
def test_python_modules(command: Command) -> None:
    module = command.argv[command.argv.index("-m") + 1]
    if module in ("pytest", "pip", "venv"):
        return
    assert importlib.util.find_spec(module) is not None, f"{command}: no module {module}"


SCRIPTS = [c for c in ALL if c.argv[0] == "source" or c.argv[0].startswith("tools/")]


@pytest.mark.parametrize("command", SCRIPTS,
                         ids=str)
def test_repository_paths(command: Command) -> None:
    path = command.argv[1] if command.argv[0] == "source" else command.argv[0]
    if foreign(path) or ROBOT_SECTION.search(command.heading):
        return
    assert (ROOT / path).exists(), f"{command}: {path} does not exist from the repository root"
