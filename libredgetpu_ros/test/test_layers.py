"""The package's layers (docs/architecture.md): their order, no import cycles, and no ROS below ``ros/``.

The import graph is drawn from every ``import`` statement of the package's modules (read with ``ast``:
module level, inside functions and under ``TYPE_CHECKING`` alike) and checked against the "Layer order"
list of docs/architecture.md: no cycle between modules, no import from a layer to one on its own line or
above. A robot without ROS, the CLI and the benchmarks use the layers below ``ros/`` directly, so none of
their modules may pull in rclpy or the generated interface packages. The modules are found by walking the
package folders, so new modules are covered without touching this test. Each layer is imported in a fresh
interpreter, module by module, so the first module that drags ROS in is named.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import libredgetpu_ros.errors
import pytest

from ._helpers import PYTHON

PACKAGE_DIR = Path(libredgetpu_ros.errors.__file__).resolve().parent
ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
# ROS by nature: the nodes and their helpers. The CLI is checked separately (its parser must stay light).
ROS_FOLDERS = {"ros", "cli"}
FORBIDDEN = ("rclpy", "libredgetpu_ros_interfaces", "libredgetpu_ros.ros")

_PROBE = r"""
import importlib, json, sys
forbidden = tuple(sys.argv[1].split(","))
def loaded():
    return sorted(m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in forbidden))
result = {"baseline": loaded(), "culprit": None, "pulled": [], "errors": {}}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        result["errors"][name] = f"{type(exc).__name__}: {exc}"
        continue
    if loaded():
        result["culprit"], result["pulled"] = name, loaded()
        break
print(json.dumps(result))
"""


def _dotted(package: Path, path: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_name(path: Path) -> str:
    return _dotted(PACKAGE_DIR, path)


def _layers() -> dict[str, list[str]]:
    """Layer name -> its modules; top-level modules (errors, fixtures, ...) form the layer "<top>"."""
    layers: dict[str, list[str]] = {"<top>": sorted(_module_name(p) for p in PACKAGE_DIR.glob("*.py"))}
    for folder in sorted(p for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").is_file()):
        if folder.name not in ROS_FOLDERS:
            layers[folder.name] = sorted(_module_name(p) for p in folder.rglob("*.py"))
    return layers


def _probe(modules: list[str]) -> dict:
    # -P: keep the working directory off sys.path (at the repository root, the ROS package folder
    # libredgetpu_ros/ would shadow the Python package).
    proc = subprocess.run([*PYTHON, "-c", _PROBE, ",".join(FORBIDDEN), *modules],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_layer_discovery_finds_the_documented_layers() -> None:
    layers = _layers()
    for expected in ("formats", "edgetpu", "backends", "postprocess", "matmul", "perception", "bags"):
        assert expected in layers, f"layer folder {expected}/ missing from {PACKAGE_DIR}"
    assert {"libredgetpu_ros.errors", "libredgetpu_ros.fixtures"} <= set(layers["<top>"])


@pytest.mark.parametrize("layer", sorted(_layers()))
def test_layer_imports_without_ros(layer: str) -> None:
    result = _probe(_layers()[layer])
    assert result["baseline"] == [], f"a bare interpreter already has {result['baseline']} loaded"
    assert result["errors"] == {}, f"modules of {layer} fail to import: {result['errors']}"
    assert result["culprit"] is None, (
        f"importing {result['culprit']} loads {result['pulled']}; layers below ros/ must not import ROS "
        "(move the import into the ros/ layer or inside the function that needs it)")


def test_cli_parser_builds_without_ros() -> None:
    # cli/main.py imports every subcommand module to build --help; heavy imports belong inside run().
    cli_modules = sorted(_module_name(p) for p in (PACKAGE_DIR / "cli").glob("*.py"))
    result = _probe(cli_modules)
    assert result["errors"] == {}, f"CLI modules fail to import: {result['errors']}"
    assert result["culprit"] is None, f"importing {result['culprit']} loads {result['pulled']}"


# -- the import graph against the documented layer order ----------------------------------------------------
def _module_names(package: Path) -> set[str]:
    return {_dotted(package, p) for p in package.rglob("*.py")}


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (every import statement, wherever it stands)."""
    modules = _module_names(package)
    root = package.name

    def known(name: str) -> str | None:  # ``a.b.func`` -> the module ``a.b``
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        name = _dotted(package, path)
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(a.name) for a in node.names if a.name.split(".")[0] == root)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the enclosing package, up level - 1
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                if base.split(".")[0] == root:
                    targets.update(known(f"{base}.{a.name}") or known(base) for a in node.names)
        graph[name] = {t for t in targets if t and t != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def layer_of(module: str) -> str:
    """``pkg.folder.x`` -> ``folder/``; a top-level module ``pkg.errors`` -> ``errors.py``; ``pkg`` ->
    ``__init__.py``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    if len(parts) == 2 and not (PACKAGE_DIR.parent / parts[0] / parts[1]).is_dir():
        return parts[1] + ".py"
    return parts[1] + "/"


def documented_ranks(text: str) -> dict[str, int]:
    """Layer -> rank (0 = top) from the numbered list under "## Layer order"."""
    section = text.split("## Layer order", 1)[1].split("\n## ", 1)[0]
    ranks: dict[str, int] = {}
    for line in section.splitlines():
        match = re.match(r"(\d+)\. (.+)", line.strip())
        if match:
            for name in re.findall(r"`([^`]+)`", match.group(2)):
                ranks[name] = int(match.group(1)) - 1
    return ranks


def layer_violations(graph: dict[str, set[str]], ranks: dict[str, int],
                     layer: Any = layer_of) -> list[str]:
    """Imports into a layer on the same line (a sibling) or above the importer's."""
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            mine, theirs = layer(module), layer(target)
            if mine == theirs or mine not in ranks or theirs not in ranks:  # unlisted: the order test says so
                continue
            if ranks[theirs] <= ranks[mine]:
                where = "beside" if ranks[theirs] == ranks[mine] else "above"
                bad.append(f"{module} ({mine}) imports {target} ({theirs}, {where} it)")
    return bad


def test_every_layer_is_in_the_documented_order() -> None:
    ranks = documented_ranks(ARCHITECTURE.read_text(encoding="utf-8"))
    layers = {layer_of(m) for m in _module_names(PACKAGE_DIR)}
    assert not layers - set(ranks), (f"layers missing from the 'Layer order' list of {ARCHITECTURE}: "
                                     f"{sorted(layers - set(ranks))}")
    assert not set(ranks) - layers, f"the list names layers that do not exist: {sorted(set(ranks) - layers)}"


def test_no_import_cycles() -> None:
    cycles = import_cycles(import_graph(PACKAGE_DIR))
    assert cycles == [], f"import cycles (move the shared part into a lower module): {cycles}"


def test_no_import_goes_up_or_sideways() -> None:
    ranks = documented_ranks(ARCHITECTURE.read_text(encoding="utf-8"))
    bad = layer_violations(import_graph(PACKAGE_DIR), ranks)
    assert bad == [], "imports against the layer order of docs/architecture.md:\n" + "\n".join(bad)


def test_the_checks_see_cycles_and_upward_imports(tmp_path) -> None:
    """The checker on a small package: a lazy import cycle, a relative import and an import upwards."""
    pkg = tmp_path / "toy"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("from . import b\n")
    (pkg / "low" / "b.py").write_text("def f():\n    from toy.low.a import g\n")
    (pkg / "top.py").write_text("import toy.low.a\n")
    (pkg / "low" / "c.py").write_text("if True:\n    from toy import top\n")
    graph = import_graph(pkg)
    assert graph["toy.low.a"] == {"toy.low.b"} and graph["toy.top"] == {"toy.low.a"}
    assert import_cycles(graph) == [["toy.low.a", "toy.low.b"]]
    ranks = documented_ranks("## Layer order\n1. `top.py`\n2. `low/`\n3. `__init__.py`\n## next\n")
    layer = {"toy": "__init__.py", "toy.top": "top.py"}.get
    assert layer_violations(graph, ranks, lambda m: layer(m) or "low/") == [
        "toy.low.c (low/) imports toy.top (top.py, above it)"]
