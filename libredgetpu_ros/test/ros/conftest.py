"""This folder's test helper modules, importable by name (``import _control_harness as harness``): pytest
runs with --import-mode=importlib, which leaves a test file's folder off ``sys.path``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _register(name: str) -> None:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])


_register("_control_harness")
