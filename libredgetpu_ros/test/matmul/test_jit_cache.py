"""numba is imported when an engine opens, not with ``libredgetpu_ros.matmul``, and the compiled kernels are
cached in the user's cache folder (``jit.cache_dir``), never in the package folder (read-only when installed).

Each case runs in a fresh interpreter: whether numba is imported and where its cache goes are per-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import libredgetpu_ros

from .._helpers import CHILD_ENV

PACKAGE = Path(libredgetpu_ros.__file__).resolve().parent
_CHILD = """
import json, sys
import libredgetpu_ros.matmul, libredgetpu_ros.cli.main
imported_early = "numba" in sys.modules
from libredgetpu_ros import jit
from libredgetpu_ros.matmul import MatMulEngine, load_template
engine = MatMulEngine(load_template(sys.argv[1]), backend="cpu")
print(json.dumps({"early": imported_early, "late": "numba" in sys.modules, "cache": str(jit.cache_dir())}))
"""


def _run(template: Path, **env: str) -> dict:
    base = {k: v for k, v in os.environ.items()
            if k not in ("NUMBA_CACHE_DIR", "LIBREDGETPU_ROS_NUMBA_CACHE", "XDG_CACHE_HOME")}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(template)], env={**base, **CHILD_ENV, **env},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _kernel_files(folder: Path) -> set[str]:
    return {p.name for p in folder.rglob("fastpath.*.nb[ic]")}


def _package_cache_writes(since: float) -> list[Path]:
    return [p for p in PACKAGE.rglob("*.nb[ic]") if p.stat().st_mtime >= since]


@pytest.mark.parametrize("variable", ["XDG_CACHE_HOME", "LIBREDGETPU_ROS_NUMBA_CACHE"])
def test_numba_imported_on_open_and_cached_in_user_folder(variable, tmp_path, fixture_path):
    template = fixture_path("matmul/dense_256_edgetpu.tflite")
    start = time.time() - 1.0  # mtime granularity
    out = _run(template, **{variable: str(tmp_path)})
    expected = tmp_path / "libredgetpu_ros" / "numba" if variable == "XDG_CACHE_HOME" else tmp_path
    assert out == {"early": False, "late": True, "cache": str(expected)}
    files = _kernel_files(expected)
    # Index and compiled code of the float->blob pass and the twin, for this package's source folder.
    for kernel in ("_kernel", "_twin", "_dense", "_tiles", "_dense_rows"):
        assert any(name.startswith(f"fastpath.{kernel}-") and name.endswith(".nbi") for name in files), files
    assert any(name.startswith("fastpath._kernel-") and name.endswith(".nbc") for name in files), files
    assert _package_cache_writes(start) == []
    # A second process loads what the first compiled: nothing new is written.
    before = {p: p.stat().st_mtime_ns for p in expected.rglob("*.nbc")}
    _run(template, **{variable: str(tmp_path)})
    assert {p: p.stat().st_mtime_ns for p in expected.rglob("*.nbc")} == before
