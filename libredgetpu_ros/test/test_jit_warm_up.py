"""Every compiled kernel a module's data path runs is compiled (or loaded from the cache folder) when the
module opens, for the exact argument types its frames bring: after opening, the numba dispatchers hold every
signature the data path uses, and frames of every kind a node hands over (read-only message views, new arrays,
larger camera frames, mono8, read-only backend outputs) add none. A kernel added without a warm-up, or a
warm-up on other types (read-only vs writable, C vs A layout, int vs int64), fails here instead of costing a
compile of seconds on a robot's first frame (issue 36; the timing is bench/bench_first_call.py's, not a
test's).

Every family of ``jit.FAMILIES`` is built first, as ``libredgetpu-ros kernels build`` builds them: the open
that follows must then compile nothing (a family's warm-up that misses a type its module's open needs would
leave a deployment image's first configure compiling after all).

One fresh interpreter per module (which kernels are compiled is per-process state), all sharing one cache
folder: the first compiles, the others load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ._helpers import CHILD_ENV

CASES = Path(__file__).with_name("_first_call_cases.py")
_CHILD = """
import json, sys, importlib.util
spec = importlib.util.spec_from_file_location("_first_call_cases", sys.argv[1])
cases = importlib.util.module_from_spec(spec); sys.modules[spec.name] = cases; spec.loader.exec_module(cases)
from libredgetpu_ros import jit
for family in jit.FAMILIES:  # what `libredgetpu-ros kernels build` runs
    jit.warm_up(family.name)
with jit.compile_watch() as watch:
    case = cases.CASES[sys.argv[2]](2, True)
inputs = case.inputs()
before = cases.signatures()
for item in inputs:
    case.call(item)
after = cases.signatures()
print(json.dumps({"missing": [k for k in case.kernels if not before.get(k)],
                  "added": cases.added(before, after), "open_compiled": watch.families}))
"""
NAMES = ("segment", "spot_red", "spot_bright", "looming_scale", "looming_libredgetpu", "flow", "flow_refined",
         "compass", "pattern", "matmul", "matmul_twin",
         "reservoir")


@pytest.fixture(scope="module")
def cache_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("numba_cache")


@pytest.mark.parametrize("name", NAMES)
def test_data_path_compiles_nothing_after_open(name: str, cache_folder: Path, fixtures_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(CHILD_ENV, LIBREDGETPU_ROS_NUMBA_CACHE=str(cache_folder))
    done = subprocess.run([sys.executable, "-c", _CHILD, str(CASES), name], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"missing": [], "added": {}, "open_compiled": []}, \
        f"{name}: compiled on a frame, not at open, or at open after the build: {out}"
