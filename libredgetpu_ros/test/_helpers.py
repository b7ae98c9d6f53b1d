"""What many test files share: loading helper modules by path, a CLI run in a child process with its memory
or file size capped, and the CLI's way of failing (one ``error:`` line, exit 2).

Helper modules (``_hostile.py``, ``_control_harness.py``, ``fuzz/harness.py``) by path: pytest runs with
``--import-mode=importlib``, which leaves a test file's folder off ``sys.path``, so a helper next to a test
is not importable by its bare name. pytest does import every test file and conftest as part
of the namespace package ``libredgetpu_ros.test``, so they reach this module relatively, the way
``fuzz/`` reaches its harness: ``from .._helpers import load_helper``.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

# This interpreter for a child process. -P (3.11+): from the repository root, the ROS package folder
# libredgetpu_ros/ would shadow the Python package; Python 3.10 has no -P (tools/test_python_versions.sh
# runs its tests from another folder instead).
PYTHON = (sys.executable, "-P") if sys.version_info >= (3, 11) else (sys.executable,)
# The package's command line, as a child process runs it.
CLI = (*PYTHON, "-m", "libredgetpu_ros.cli.main")
# Child processes: the repository root off sys.path (its ROS package folder would shadow the Python
# package) and one BLAS / OpenMP thread (the limits below count every thread's stack and arena).
CHILD_ENV = {"PYTHONSAFEPATH": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


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


def resource_limits(memory: int | None = None, fsize: int | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` capping the child's address space (RLIMIT_AS) and file size (RLIMIT_FSIZE), in bytes:
    a read that trusts a header's size fails with MemoryError under the first, a write past the second with
    EFBIG."""
    def apply() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return apply


def start_limited(argv: Sequence[str], *, memory: int | None = None, fsize: int | None = None,
                  **popen: object) -> subprocess.Popen:
    """``argv`` started under :func:`resource_limits` with :data:`CHILD_ENV` (stdout/stderr piped, bytes)."""
    return subprocess.Popen(list(argv), env={**os.environ, **CHILD_ENV},
                            preexec_fn=resource_limits(memory, fsize), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, **popen)


def run_limited(argv: Sequence[str], *, memory: int | None = None, fsize: int | None = None,
                timeout: float = 60.0, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` run to the end under :func:`resource_limits` with :data:`CHILD_ENV`; text output captured.
    ``run_limited([sys.executable, "-"], input=code, memory=1 << 30)`` runs a snippet."""
    return subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **CHILD_ENV}, preexec_fn=resource_limits(memory, fsize),
                          check=False)


def one_error_line(code: int, err: str, *contains: str, max_length: int | None = 1000) -> str:
    """Assert the CLI's way of failing on bad input: exit code 2, no traceback, stderr exactly one line
    starting ``error: `` (holding each of ``contains``, shorter than ``max_length``: user text is clipped in
    messages); return that line."""
    tail = err[-2000:]
    assert code == 2, f"exit code {code}, expected 2; stderr: {tail}"
    assert "Traceback" not in err, tail
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), tail
    for text in contains:
        assert text in lines[0], f"{text!r} not in {lines[0]!r}"
    if max_length is not None:
        assert len(lines[0]) < max_length, len(lines[0])
    return lines[0]


def spin_until(executor: Any, what: str, done: Callable[[], object], *, detail: Callable[[], object] = str,
               within: float = 20.0) -> None:
    """Spin ``executor`` (one callback at a time) until ``done()``; past ``within`` s an AssertionError naming
    ``what`` with ``detail()`` (e.g. the node's counters)."""
    deadline = time.monotonic() + within
    while not done():
        executor.spin_once(timeout_sec=0.05)
        assert time.monotonic() < deadline, (what, detail())
