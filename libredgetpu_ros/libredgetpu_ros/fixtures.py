"""Locate the shared test fixtures (real models, images, labels) outside the repository.

The fixtures are not redistributed with the project. They are looked up in ``$LIBREDGETPU_ROS_FIXTURES``
if set, else in ``../shared/fixtures`` beside the repository checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "LIBREDGETPU_ROS_FIXTURES"
_REPO_ROOT = Path(__file__).resolve().parents[2]


class FixtureMissingError(FileNotFoundError):
    """A fixture file is not where it should be."""


def fixtures_dir() -> Path:
    """The fixtures folder; raise FixtureMissingError naming every place looked at.

    An explicit ``$LIBREDGETPU_ROS_FIXTURES`` is the only place looked at: a wrong override is an error, not a
    silent fall-back to another copy."""
    if os.environ.get(ENV_VAR):
        candidates = [Path(os.environ[ENV_VAR])]
    else:
        candidates = [_REPO_ROOT.parent / "shared" / "fixtures", Path.cwd().parent / "shared" / "fixtures"]
    for path in candidates:
        if path.is_dir():
            return path
    looked = ", ".join(str(p) for p in candidates)
    hint = f"{ENV_VAR} is not a directory" if os.environ.get(ENV_VAR) else f"set {ENV_VAR}"
    raise FixtureMissingError(f"fixtures folder not found (looked in: {looked}); {hint}")


def fixture(relative: str) -> Path:
    """Path of one fixture file, e.g. ``fixture("posenet/..._edgetpu.tflite")``."""
    base = fixtures_dir()
    path = base / relative
    if not path.exists():
        raise FixtureMissingError(f"fixture {relative!r} not found at {path} (fixtures folder: {base}; "
                                  f"override with {ENV_VAR})")
    return path
