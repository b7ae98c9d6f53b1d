"""This folder's test helper modules, importable by name (``import _control_harness as harness``): pytest
runs with --import-mode=importlib, which leaves a test file's folder off ``sys.path``."""

from __future__ import annotations

from pathlib import Path

from .._helpers import load_helper

HERE = Path(__file__).resolve().parent


load_helper(HERE / "_control_harness.py")
