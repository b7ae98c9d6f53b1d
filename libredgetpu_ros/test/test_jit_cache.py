"""The package's numba cache notices a change in any kernel file: numba stamps a kernel's cached machine code
with its own file only, so a kernel calling one defined in another file kept running the old callee after
that file changed (an edit, a partial upgrade). Run in fresh processes, as a user's next start would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

RUN = """
import sys
from pathlib import Path
from libredgetpu_ros import jit
jit._PACKAGE_DIR = Path(sys.argv[1]).resolve()  # the folder whose kernels the package's locator caches
sys.path.insert(0, str(Path(sys.argv[1]).parent))
from fakepkg.outer_kernels import outer
print(outer())
"""
INNER = "from libredgetpu_ros import jit\n\n@jit.njit(cache=True)\ndef inner():\n    return {}\n"
OUTER = ("from libredgetpu_ros import jit\nfrom fakepkg.inner_kernels import inner\n\n"
         "@jit.njit(cache=True)\ndef outer():\n    return inner() + 10\n")


def _run(pkg: Path, cache: Path) -> int:
    done = subprocess.run([sys.executable, "-c", RUN, str(pkg)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LIBREDGETPU_ROS_NUMBA_CACHE": str(cache)})
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


def test_a_changed_callee_in_another_file_is_recompiled_into_its_caller(tmp_path: Path) -> None:
    pkg, cache = tmp_path / "fakepkg", tmp_path / "cache"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "inner_kernels.py").write_text(INNER.format(1))
    (pkg / "outer_kernels.py").write_text(OUTER)
    assert _run(pkg, cache) == 11
    assert any(cache.rglob("*.nbi")), "the kernels were not cached where the package puts them"
    assert _run(pkg, cache) == 11  # from the cache
    (pkg / "inner_kernels.py").write_text(INNER.format(2))  # same size: only the text and time differ
    stamp = (pkg / "outer_kernels.py").stat().st_mtime + 5
    os.utime(pkg / "inner_kernels.py", (stamp, stamp))
    assert _run(pkg, cache) == 12  # the old code kept 11: outer's cache had the old inner compiled in
