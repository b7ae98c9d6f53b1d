"""docs/architecture.md stays a map of the package: every module named where its folder is described.

A module ``libredgetpu_ros/<folder>/<name>.py`` counts as described when one paragraph of the document (text
between blank lines, outside fenced blocks) names its folder (``<folder>/``, the full path from the package:
``ros/camera/``) and the module: ``<name>.py``, `` `<name>` ``, a qualified name ``<name>.<attr>`` or
``<folder>/<name>``. A top-level module needs ``<name>.py`` anywhere. A bare word is not enough: module
names such as ``node``, ``params`` or ``report`` are also ordinary words of the text. ``__init__.py`` files
are their folder. The other way round, every ``<folder>/<name>.py`` path and every bare ``<name>.py`` the
document names exists (in the package, tools/ or bench/), so a removed or renamed module cannot stay on
the map. test_layers.py checks the folders against "Layer order".
"""

from __future__ import annotations

import re
from pathlib import Path

import libredgetpu_ros.errors

PACKAGE_DIR = Path(libredgetpu_ros.errors.__file__).resolve().parent
ARCHITECTURE = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"


def _modules() -> list[Path]:
    return sorted(p.relative_to(PACKAGE_DIR) for p in PACKAGE_DIR.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def _paragraphs(text: str) -> list[str]:
    return re.split(r"\n[ \t]*\n", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))


def _described(module: Path, text: str, paragraphs: list[str]) -> bool:
    folder, stem = "/".join(module.parts[:-1]), re.escape(module.stem)
    if not folder:
        return re.search(rf"(?<![\w/]){stem}\.py\b", text) is not None
    if re.search(rf"(?<![\w/]){re.escape(folder)}/{stem}\b", text):
        return True
    folder_re = re.compile(rf"(?<![\w/.]){re.escape(folder)}/")
    name_re = re.compile(rf"(?<![\w/.])(?:{stem}\.py\b|`{stem}`|{stem}\.[A-Za-z_]\w*)")
    return any(folder_re.search(p) and name_re.search(p) for p in paragraphs)


def test_every_module_is_on_the_map() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    paragraphs = _paragraphs(text)
    missing = [str(m) for m in _modules() if not _described(m, text, paragraphs)]
    assert not missing, (f"{ARCHITECTURE.name} does not describe these modules where it describes their "
                         f"folder (name each as `name.py` or `name` in that paragraph): {missing}")


def test_every_module_path_on_the_map_exists() -> None:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    folders = sorted(p.name for p in PACKAGE_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    paths = re.findall(rf"(?<![\w/.])((?:{'|'.join(folders)})/[\w/]*\w\.py)\b", text)
    stale = sorted({p for p in paths if not (PACKAGE_DIR / p).is_file()})
    assert not stale, f"{ARCHITECTURE.name} names modules that do not exist: {stale}"


def test_every_file_name_on_the_map_exists() -> None:
    """A bare ``name.py`` (a module named in its folder's paragraph, a tool, a bench) is a file somewhere."""
    repo = ARCHITECTURE.parents[1]
    known = {p.name for top in ("libredgetpu_ros", "tools", "bench") for p in (repo / top).rglob("*.py")}
    names = re.findall(r"(?<![\w/.*-])(\w+\.py)\b", ARCHITECTURE.read_text(encoding="utf-8"))
    stale = sorted({n for n in names if n not in known})
    assert not stale, f"{ARCHITECTURE.name} names files that do not exist: {stale}"


def test_the_check_sees_a_missing_module() -> None:
    """The rule is not vacuous: a module only the folder's paragraph mentions as a plain word fails it."""
    text = "`ros/camera/`: the node, its report and `params`; `intake.py`\n\nno folder here: `qos`"
    paragraphs = _paragraphs(text)
    assert _described(Path("ros/camera/params.py"), text, paragraphs)
    assert _described(Path("ros/camera/intake.py"), text, paragraphs)
    assert not _described(Path("ros/camera/report.py"), text, paragraphs)
    assert not _described(Path("ros/camera/qos.py"), text, paragraphs)
    assert not _described(Path("errors.py"), text, paragraphs)
