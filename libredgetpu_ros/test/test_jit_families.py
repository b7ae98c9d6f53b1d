"""Every file of the package that defines compiled kernels is one family of ``jit.FAMILIES`` (what
``libredgetpu-ros kernels build`` compiles and a node's configure names when it had to compile), each with the
``warm_up()`` its modules run when they open. A kernel file added without a family would be left out of every
deployment image's build: it fails here. Cheap: nothing is compiled (importing a kernel module does not import
numba)."""

from __future__ import annotations

import importlib
from pathlib import Path

from libredgetpu_ros import jit

PACKAGE = Path(jit.__file__).resolve().parent


def _module(path: Path) -> str:
    return "libredgetpu_ros." + ".".join(path.resolve().relative_to(PACKAGE).with_suffix("").parts)


def test_every_file_carrying_the_kernel_marker_is_a_family() -> None:
    marked = {_module(path) for path in jit.kernel_files()}
    listed = {family.module for family in jit.FAMILIES}
    assert marked == listed, f"kernel files without a family: {sorted(marked - listed)}; " \
                             f"families without kernels: {sorted(listed - marked)}"
    assert len({family.name for family in jit.FAMILIES}) == len(jit.FAMILIES)


def test_the_marker_scan_finds_a_kernel_file_it_was_not_told_about(tmp_path: Path, monkeypatch) -> None:
    """The scan reads the files' text, so a new kernel file is found without being registered anywhere."""
    (tmp_path / "new_kernels.py").write_text("from libredgetpu_ros import jit\n\n"
                                             "KERNELS = ()\njit.compile_kernels(globals(), KERNELS)\n")
    (tmp_path / "plain.py").write_text("x = 1\n")
    monkeypatch.setattr(jit, "_PACKAGE_DIR", tmp_path)
    assert [p.name for p in jit.kernel_files()] == ["new_kernels.py"]


def test_every_family_has_the_warm_up_its_modules_run() -> None:
    for family in jit.FAMILIES:
        module = importlib.import_module(family.module)
        assert callable(getattr(module, "warm_up", None)), f"{family.module} has no warm_up()"
        assert jit.family(family.name) is family
