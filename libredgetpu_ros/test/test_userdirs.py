"""userdirs: the per-user cache folders follow one rule (the variable, else an absolute XDG_CACHE_HOME, else
~/.cache), once. Before: a relative XDG_CACHE_HOME put the caches under the current directory."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from libredgetpu_ros.models import store
from libredgetpu_ros.userdirs import user_cache_dir

from libredgetpu_ros import jit

PACKAGE_DIR = Path(jit.__file__).resolve().parent


@pytest.mark.parametrize(("cache_dir", "sub", "var"), [(jit.cache_dir, "numba", jit.CACHE_VAR),
                                                       (store.cache_dir, "models", "LIBREDGETPU_ROS_MODELS")])
def test_every_cache_folder_follows_the_one_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  cache_dir, sub: str, var: str) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = tmp_path / "home" / ".cache" / "libredgetpu_ros" / sub
    for value in (None, ""):  # unset and empty alike: the XDG default
        for name in (var, "XDG_CACHE_HOME"):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        assert cache_dir() == user_cache_dir(sub, var) == default
    for relative in ("relative/cache", ".", "~/cache"):  # XDG spec: "consider the path invalid and ignore it"
        monkeypatch.setenv("XDG_CACHE_HOME", relative)
        assert cache_dir() == user_cache_dir(sub, var) == default, relative
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "libredgetpu_ros" / sub
    monkeypatch.setenv(var, str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_the_xdg_rule_is_written_once() -> None:
    """Before: jit.py and models/store.py each read XDG_CACHE_HOME with their own copy of the rule."""
    readers = sorted(str(path.relative_to(PACKAGE_DIR)) for path in PACKAGE_DIR.rglob("*.py")
                     if any(isinstance(node, ast.Constant) and node.value == "XDG_CACHE_HOME"
                            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))))
    assert readers == ["userdirs.py"]
