"""Every layer below ``ros/`` imports without rclpy (docs/architecture.md).

A robot without ROS, the CLI and the benchmarks use these layers directly, so none of their modules may
pull in rclpy or the generated interface packages. The modules are found by walking the package folders,
so new modules are covered without touching this test. Each layer is imported in a fresh interpreter,
module by module, so the first module that drags ROS in is named.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import libredgetpu_ros.errors
import pytest

PACKAGE_DIR = Path(libredgetpu_ros.errors.__file__).resolve().parent
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


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
    proc = subprocess.run([sys.executable, "-P", "-c", _PROBE, ",".join(FORBIDDEN), *modules],
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
