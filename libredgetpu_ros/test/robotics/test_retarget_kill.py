"""`retarget -o` replaces a template's three files as one unit (issue 30 item 7): the real CLI, in a child
process, SIGKILLed just before its k-th change inside the output folder (file created or opened for
writing, link, rename, removal), for every k of the write; after each kill the template at OUT loads and is
wholly the old set or wholly the new one. Before: the files were written one at a time, and a kill between
two of them left the new compiled model beside the old twin (refused on load, the previous set lost)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from libredgetpu_ros.robotics.template import load_template
from libredgetpu_ros.robotics.template_set import current_set

pytestmark = pytest.mark.timeout(600)

NAME = "my_red"
COLOURS = {"a": ("1", "-0.5", "-0.5"), "b": ("-0.5", "1", "-0.5")}

# The child: the real CLI with os / open wrapped so that it SIGKILLs itself before its k-th change inside
# the output folder (k = 0: never; at exit it prints how many changes it made).
_CHILD = r'''
import builtins, os, signal, sys
from libredgetpu_ros.cli.main import main
folder, kill_at, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
count = 0
def inside(arg):
    return isinstance(arg, (str, os.PathLike)) and os.fspath(arg).startswith(folder)
def step(args):
    global count
    if any(inside(a) for a in args):
        count += 1
        if count == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
def wrap(fn, writes=None):
    def wrapped(*args, **kwargs):
        if writes is None or writes(*args, **kwargs):
            step(args[:2])
        return fn(*args, **kwargs)
    return wrapped
for name in ("replace", "rename", "link", "unlink", "mkdir", "rmdir", "symlink"):
    setattr(os, name, wrap(getattr(os, name)))
os.open = wrap(os.open, lambda path, flags, *a, **k: flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
builtins.open = wrap(builtins.open, lambda file, mode="r", *a, **k: any(c in mode for c in "wax+"))
code = main(argv)
print("changes", count)
sys.exit(code)
'''


def _retarget(out: Path, colour: str, kill_at: int) -> subprocess.CompletedProcess:
    argv = ["retarget", "color_red_64x64", "--color", *COLOURS[colour], "-o",
            str(out / f"{NAME}_edgetpu.tflite")]
    return subprocess.run([sys.executable, "-c", _CHILD, str(out), str(kill_at), *argv], capture_output=True,
                          text=True, timeout=120)


def _set_bytes(out: Path) -> tuple[bytes, bytes, bytes]:
    """The three files the loader reads at ``out`` (through the journal while a replacement is pending)."""
    base = current_set(out / NAME)
    suffixes = ("_edgetpu.tflite", ".tflite", "_edgetpu.json")
    return tuple(base.with_name(NAME + s).read_bytes() for s in suffixes)


def test_a_kill_at_any_point_leaves_a_template_that_loads(tmp_path: Path) -> None:
    sets = {}
    for colour in COLOURS:  # the two complete sets, written without interruption
        clean = tmp_path / f"clean_{colour}"
        clean.mkdir()
        done = _retarget(clean, colour, 0)
        assert done.returncode == 0, done.stderr
        sets[colour] = _set_bytes(clean)
    changes = int(_retarget(tmp_path / "clean_a", "a", 0).stdout.split("changes")[-1])
    assert changes >= 4

    out = tmp_path / "out"
    out.mkdir()
    assert _retarget(out, "a", 0).returncode == 0
    previous = "a"
    killed = 0
    for kill_at in range(1, changes + 1):  # every change of one write, alternating the new colour
        new = "b" if previous == "a" else "a"
        done = _retarget(out, new, kill_at)
        killed += done.returncode == -9
        template = load_template(out / f"{NAME}_edgetpu.tflite")  # refused if the files were mixed
        assert template.compiled is not None
        now = _set_bytes(out)
        assert now in (sets[previous], sets[new]), f"kill before change {kill_at}: a mixed set"
        previous = new if now == sets[new] else previous
    assert killed == changes  # each run died at its point
    done = _retarget(out, "a", 0)  # a later write completes and leaves no stage, journal or temporary
    assert done.returncode == 0 and _set_bytes(out) == sets["a"]
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{NAME}{s}" for s in
                                                           ("_edgetpu.tflite", ".tflite", "_edgetpu.json"))
