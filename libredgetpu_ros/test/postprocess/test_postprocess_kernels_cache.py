"""The DeepLab tail's compiled kernels go through ``libredgetpu_ros.jit``: numba is imported when a tail is
built, not when the post-processing modules are imported, and the kernels are cached in the user's cache
folder, never in the package folder (read-only when installed). A fresh interpreter per case: whether numba
is imported and where its cache goes are per-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import libredgetpu_ros
from libredgetpu_ros import jit

from .._helpers import CHILD_ENV

PACKAGE = Path(libredgetpu_ros.__file__).resolve().parent
_CHILD = """
import json, sys
import libredgetpu_ros.perception.tasks, libredgetpu_ros.postprocess.deeplab
imported_early = "numba" in sys.modules
from libredgetpu_ros.fixtures import fixture
from libredgetpu_ros.formats import load_model
from libredgetpu_ros.postprocess.deeplab import DeepLabTail
tail = DeepLabTail.from_model(load_model(fixture("deeplab/deeplabv3_mnv2_pascal_quant_edgetpu.tflite")))
convs = [c._kernel is not None for c in tail._convs.values()]
print(json.dumps({"early": imported_early, "late": "numba" in sys.modules,
                  "compiled": [tail._upsample.compiled, *convs]}))
"""


@pytest.mark.skipif(not jit.available(), reason="numba is not installed")
def test_kernels_compiled_when_built_and_cached_in_the_user_folder(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items()
            if k not in ("NUMBA_CACHE_DIR", "LIBREDGETPU_ROS_NUMBA_CACHE", "XDG_CACHE_HOME")}
    env = {**base, **CHILD_ENV, "XDG_CACHE_HOME": str(tmp_path)}
    folder = tmp_path / "libredgetpu_ros" / "numba"
    start = time.time() - 1.0  # mtime granularity
    compiled: dict[Path, int] = {}
    for run in range(2):  # the second process loads what the first compiled
        done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out == {"early": False, "late": True, "compiled": [True, True, True]}
        if run == 0:
            files = {p.name for p in folder.rglob("*.nbi")}
            for kernel in ("kernels._requantize", "kernels._resize_argmax"):
                assert any(name.startswith(f"{kernel}-") for name in files), files
            compiled = {p: p.stat().st_mtime_ns for p in folder.rglob("*.nbc")}
            assert compiled
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*.nbc")} == compiled
    assert [p for p in PACKAGE.rglob("*.nb[ic]") if p.stat().st_mtime >= start] == []
