"""Loading the tests' helper modules (``_hostile.py``, ``_control_harness.py``, ``fuzz/harness.py``) by path.

pytest runs with ``--import-mode=importlib``, which leaves a test file's folder off ``sys.path``, so a helper
next to a test is not importable by its bare name. pytest does import every test file and conftest as part
of the namespace package ``libredgetpu_ros.test``, so they reach this module relatively, the way
``fuzz/`` reaches its harness: ``from .._helpers import load_helper``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_helper(path: Path, name: str | None = None) -> ModuleType:
    """The module at ``path`` as ``sys.modules[name]`` (default: the file's stem), loaded once per process.

    Registered under a bare name so the test files that share a helper (``_control_harness`` is used from
    ros/, sophgo/ and teamtensor/) share one module, and a test file can ``import name`` after its
    conftest loaded it. Registered before it runs: dataclasses and pickle look a module up by its name.
    """
    name = name or path.stem
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"no Python module at {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]  # a later load retries instead of finding half a module
            raise
    return module
