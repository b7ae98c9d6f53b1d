"""The robotics modules' compiled kernels (flow, spot, looming) go through ``libredgetpu_ros.jit``:
numba is imported when a module opens, not when it is imported, and the kernels are cached in the user's cache
folder, never in the package folder (read-only when installed). A fresh interpreter per case: whether numba
is imported and where its cache goes are per-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import libredgetpu_ros

from .._helpers import CHILD_ENV

PACKAGE = Path(libredgetpu_ros.__file__).resolve().parent
_CHILD = """
import json, sys
import libredgetpu_ros.robotics.compass, libredgetpu_ros.robotics.flow, libredgetpu_ros.robotics.spot
import libredgetpu_ros.robotics.looming
imported_early = "numba" in sys.modules
from libredgetpu_ros.robotics.flow import OpticalFlow
from libredgetpu_ros.robotics.looming import LoomingDetector
from libredgetpu_ros.robotics.spot import SpotTracker
flow = OpticalFlow.from_template("gabor_64x64_p4", backend="cpu")
spot = SpotTracker.from_template(64, "red", backend="cpu")
looming = LoomingDetector.from_template(64, backend="cpu")
print(json.dumps({"early": imported_early, "late": "numba" in sys.modules,
                  "kernels": [flow.kernels, spot.validity.kernels, looming.border.kernels,
                              looming.scale_ttc.kernels]}))
"""


def test_kernels_compiled_on_open_and_cached_in_the_user_folder(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items()
            if k not in ("NUMBA_CACHE_DIR", "LIBREDGETPU_ROS_NUMBA_CACHE", "XDG_CACHE_HOME")}
    env = {**base, **CHILD_ENV, "LIBREDGETPU_ROS_NUMBA_CACHE": str(tmp_path)}
    start = time.time() - 1.0  # mtime granularity
    for _ in range(2):  # the second process loads what the first compiled
        done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out == {"early": False, "late": True, "kernels": [True] * 4}
        if _ == 0:
            files = {p.name for p in tmp_path.rglob("*.nbi")}
            for kernel in ("flow_kernels.pool_features", "flow_refine_kernels.refine_seed",
                           "spot_kernels.evidence", "looming_kernels.border_correction",
                           "looming_kernels.register_scale"):
                assert any(name.startswith(f"{kernel}-") for name in files), files
            compiled = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.nbc")}
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.nbc")} == compiled
    assert [p for p in PACKAGE.rglob("*.nb[ic]") if p.stat().st_mtime >= start] == []
