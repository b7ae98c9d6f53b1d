"""Where a bare template name in a config (``template: color_red_64x64``, ``template: 256``) is found.

One function for the robotics modules (robotics/template.py), the Dense(N) templates (matmul/template.py), the
recognition extractor and doctor's "templates" check, so every path agrees. Order:

1. the model cache (``libredgetpu-ros models fetch NAME`` / ``models import DIR`` put it there, every file
   SHA-256 checked): what a robot has;
2. ``$LIBREDGETPU_ROS_TEMPLATES`` (a folder, searched with its sub-folders) when set;
3. the shared fixtures' ``matmul/`` and ``robotics/`` folders (developer machines; absent on a robot).

When the name is nowhere, one ``ConfigError`` says whether the name is a catalogue template
(then: the exact fetch / import command) or unknown (then: the close names and ``models list``).
Nothing is downloaded here: a node at configure time must not reach for the network. ROS-free.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from libredgetpu_ros.errors import ConfigError
from libredgetpu_ros.models.catalogue import CATALOGUE

TEMPLATES_ENV = "LIBREDGETPU_ROS_TEMPLATES"
# A template's model files (twin and compiled model) are read within this (formats.load_model's max_bytes):
# far above the largest shipped template, far below what a huge twin would cost to read whole.
MAX_TEMPLATE_BYTES = 64 * 1024 * 1024
_SUFFIXES = ("_edgetpu.tflite", "_edgetpu.json", ".tflite")

# The templates the shipped configs (config/*.yaml) name, by config; test_templates.py keeps this true.
CONFIG_TEMPLATES: dict[str, tuple[str, ...]] = {
    "control": ("dense_256",),
    "tracker_spot": ("color_red_64x64",),
    "tracker_pattern": ("pattern_64x64_8x8_1ch",),
    "looming": ("looming_64x64_3x3",),
    "flow": ("gabor_64x64_p4",),
    "recognition": ("dense_1024", "mobilenet_v1_1.0_224_quant_embedding_extractor"),
}


def base_name(text: str) -> str:
    """``NAME`` of ``NAME``, ``NAME.tflite``, ``NAME_edgetpu.tflite`` or ``NAME_edgetpu.json``."""
    for suffix in _SUFFIXES:
        if text.endswith(suffix):
            return text[: -len(suffix)]
    return text


def local_folders() -> list[Path]:
    """The folders searched after the cache: ``$LIBREDGETPU_ROS_TEMPLATES``, then the fixtures' matmul/ and
    robotics/ (those that exist)."""
    from libredgetpu_ros.fixtures import FixtureMissingError, fixtures_dir

    folders = [Path(os.environ[TEMPLATES_ENV])] if os.environ.get(TEMPLATES_ENV) else []
    try:
        root = fixtures_dir()
        folders += [root / "matmul", root / "robotics"]
    except FixtureMissingError:
        pass
    return [f for f in folders if f.is_dir()]


def find_in_folder(name: str, folder: Path) -> Path | None:
    """The base path ``.../NAME`` of the first ``NAME.tflite`` in ``folder`` or its sub-folders (sorted), or
    None; ConfigError when the folder is too deep or too large to search (paths.walk_files)."""
    from libredgetpu_ros.paths import walk_files

    direct = folder / f"{name}.tflite"
    if direct.is_file():
        return folder / name
    wanted = f"{name}.tflite"
    hits = [p for p in walk_files(folder, "template folder", error=ConfigError) if p.name == wanted]
    return hits[0].with_name(name) if hits else None


def find_template(name: str) -> tuple[Path, str] | None:
    """(base path ``folder/NAME``, where found: ``"cache"`` or the folder) of template ``name``, or None.

    In the cache only a complete entry counts (a half-fetched one is fetched again, not half used)."""
    from libredgetpu_ros.models.store import cache_dir, status

    name = base_name(name)
    entry = CATALOGUE.get(name)
    if entry is not None and entry.is_template and status(entry) == "cached":
        return cache_dir() / name, "cache"
    for folder in local_folders():
        found = find_in_folder(name, folder)
        if found is not None:
            return found, str(folder)
    return None


def resolve_template(name: str | int, *, family: str = "template") -> Path:
    """The base path ``folder/NAME`` of a template given by bare name (an int N means ``dense_N``); files are
    ``NAME.tflite``, ``NAME_edgetpu.tflite``, ``NAME_edgetpu.json`` beside it. ConfigError when nowhere."""
    text = f"dense_{name}" if isinstance(name, int) else base_name(str(name).strip())
    found = find_template(text)
    if found is not None:
        return found[0]
    raise ConfigError(not_found_message(text, family))


def not_found_message(name: str, family: str = "template") -> str:
    """The error for a template found nowhere: known, not cached -> the commands; unknown -> close names."""
    from libredgetpu_ros.models.store import cache_dir

    looked = ", ".join([f"the model cache ({cache_dir()})"] + [str(f) for f in local_folders()])
    env = os.environ.get(TEMPLATES_ENV, "")
    if env and not Path(env).is_dir():  # said, not skipped in silence (doctor warns too)
        from libredgetpu_ros.textdata import clip

        looked += f"; ${TEMPLATES_ENV} ({clip(env)}) is not a folder and was not searched"
    entry = CATALOGUE.get(name)
    if entry is not None and entry.is_template:
        return (f"{family} {name!r} is not installed (looked in: {looked}): run "
                f"`libredgetpu-ros models fetch {name}` (online, or with --mirror URL), or offline "
                f"`libredgetpu-ros models import DIR` "
                f"with DIR a folder holding {', '.join(f.name for f in entry.files)}")
    known = sorted(n for n, e in CATALOGUE.items() if e.is_template)
    close = difflib.get_close_matches(name, known, n=4, cutoff=0.6)
    hint = (f"did you mean {', '.join(close)}?" if close else
            f"catalogue templates: {', '.join(known)}")
    return (f"{family} {name!r} is unknown: not a catalogue template and not in {looked}; {hint} "
            f"(`libredgetpu-ros models list` shows the catalogue; a template of your own is given by the "
            f"path of one of its files)")
