"""Point the ROS wheels' exported CMake include paths at this venv's Python and NumPy headers.

The ``ros-*`` wheels are built in a manylinux container, and their ``share/**/*Export.cmake`` files keep
that container's include directories (``/opt/python/cp311-cp311/...``). CMake refuses targets whose
include directories do not exist, so building our interfaces against them fails until the paths are
rewritten. Idempotent: run it after every ``pip install`` of the ROS wheels.

Usage: python tools/fix_ros_cmake_exports.py [PREFIX]   (PREFIX defaults to sys.prefix, the venv)
"""

from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path

# The build host's CPython headers and NumPy headers, as the wheels recorded them.
_PYTHON_INCLUDE = re.compile(r"/opt/python/cp3\d+-cp3\d+t?/include/python3\.\d+t?")
_NUMPY_INCLUDE = re.compile(
    r"/opt/python/cp3\d+-cp3\d+t?/lib/python3\.\d+t?/site-packages/numpy/(?:_core|core)/include")


def rewrite(text: str, python_include: str, numpy_include: str) -> str:
    # NumPy first: its pattern is longer and does not overlap the Python one after substitution.
    text = _NUMPY_INCLUDE.sub(numpy_include, text)
    return _PYTHON_INCLUDE.sub(python_include, text)


def main(argv: list[str]) -> int:
    prefix = Path(argv[1]) if len(argv) > 1 else Path(sys.prefix)
    share = prefix / "share"
    if not share.is_dir():
        print(f"error: {share} does not exist; install the ROS wheels into {prefix} first", file=sys.stderr)
        return 2
    import numpy  # only needed here, and only in the venv that builds the interfaces

    python_include = sysconfig.get_paths()["include"]
    numpy_include = numpy.get_include()
    if not (Path(python_include) / "Python.h").is_file():
        print(f"error: no Python.h in {python_include}; install the python3.11-dev package", file=sys.stderr)
        return 2
    changed = 0
    for path in sorted(share.glob("**/*Export.cmake")):
        text = path.read_text()
        new = rewrite(text, python_include, numpy_include)
        if new != text:
            path.write_text(new)
            changed += 1
    print(f"fix_ros_cmake_exports: {changed} file(s) rewritten under {share} "
          f"(Python {python_include}, NumPy {numpy_include})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
