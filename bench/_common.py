"""What the benchmarks share besides timing (``_timing.py``): BLAS kept to one thread before NumPy loads it,
the test tree's scene helpers loaded by path, and the layout of the repository they read from.

Imported as ``import _common`` (a script's own folder is on ``sys.path``, like ``_timing.py``); standard
library only, so importing it first changes nothing NumPy has read yet.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TESTS = ROOT / "libredgetpu_ros" / "test"
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def single_threaded_blas() -> None:
    """BLAS and OpenMP on one thread unless the environment says otherwise: thread CPU time counts this
    thread only, so it must see all the work. Call before NumPy is imported (its BLAS reads these once)."""
    for var in BLAS_THREAD_VARS:
        os.environ.setdefault(var, "1")


def load_test_helper(relative: str) -> ModuleType:
    """A helper module of the test tree (``"robotics/_flow_scenes.py"``), loaded by path once per process and
    registered under its file name (the tests' helpers are not an installed package)."""
    path = TESTS / relative
    loaded = sys.modules.get(path.stem)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "") == path:
        return loaded
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the test helper {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def import_test_module(dotted: str) -> ModuleType:
    """A module of the test tree by dotted name under ``test/`` (``"fuzz.targets"``), imported as a module of
    packages standing for the test tree, so its relative imports (``.harness``, ``.._helpers``) resolve as
    under pytest (the test tree is not an installed package)."""
    parts = dotted.split(".")[:-1]
    for depth in range(len(parts) + 1):
        name = ".".join(["_bench_tests", *parts[:depth]])
        package = ModuleType(name)
        package.__path__ = [str(TESTS.joinpath(*parts[:depth]))]
        sys.modules.setdefault(name, package)
    return importlib.import_module(f"_bench_tests.{dotted}")
