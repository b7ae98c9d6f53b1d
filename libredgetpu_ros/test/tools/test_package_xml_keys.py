"""Every dependency key of package.xml resolves with rosdep in every supported ROS 2 distribution.

Checked offline against trimmed copies of rosdistro's key files (test/data/rosdistro/README.md): a ROS
package must be released in each distribution (``distribution.yaml``), any other key must be a rosdep key
with a Debian and an Ubuntu rule (``rosdep/base.yaml`` / ``rosdep/python.yaml``). package.xml once claimed
rosdistro had no ``python3-flatbuffers`` key (it has) and left ``python3-rosbags-pip`` and ``libusb-1.0``
undeclared (issue 33)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

PACKAGE = Path(__file__).resolve().parents[2]
REPO = PACKAGE.parent
DATA = PACKAGE / "test" / "data" / "rosdistro"
DEPEND_TAGS = ("depend", "build_depend", "exec_depend", "test_depend", "build_export_depend")


def _keys(package_xml: Path) -> list[str]:
    root = ET.parse(package_xml).getroot()
    return [el.text.strip() for tag in DEPEND_TAGS for el in root.findall(tag)]


def _workspace_packages() -> set[str]:
    """Packages of this repository (rosdep skips them with --from-paths src --ignore-src)."""
    return {ET.parse(p).getroot().findtext("name") for p in REPO.glob("*/package.xml")}


def _rosdep_rules() -> dict[str, dict]:
    rules: dict[str, dict] = {}
    for name in ("base.yaml", "python.yaml"):
        rules.update(yaml.safe_load((DATA / name).read_text()))
    return rules


KEYS = _keys(PACKAGE / "package.xml")
DISTRIBUTIONS: dict[str, list[str]] = yaml.safe_load((DATA / "distribution_packages.yaml").read_text())


def test_the_key_files_hold_the_supported_distributions() -> None:
    assert set(DISTRIBUTIONS) == {"humble", "jazzy", "kilted", "rolling"}
    assert len(KEYS) >= 20


@pytest.mark.parametrize("key", KEYS)
def test_every_key_resolves(key: str) -> None:
    if key in _workspace_packages():
        return
    rules = _rosdep_rules()
    if key in rules:
        rule = rules[key]
        missing = [os for os in ("debian", "ubuntu") if os not in rule]
        assert not missing, f"rosdep key {key!r} has no rule for {missing} (test/data/rosdistro)"
        return
    unreleased = [d for d, packages in DISTRIBUTIONS.items() if key not in packages]
    assert not unreleased, (f"package.xml key {key!r} is neither a rosdep key of rosdep/base.yaml or "
                            f"rosdep/python.yaml nor a ROS package released in {unreleased} "
                            f"(test/data/rosdistro/README.md says how to refresh the copies)")


@pytest.mark.parametrize("key", ["python3-flatbuffers", "python3-rosbags-pip", "libusb-1.0"])
def test_libraries_with_keys_are_declared(key: str) -> None:
    """What the package imports or loads and rosdep can install is declared, not left to a pip line."""
    assert key in KEYS


def test_no_key_twice() -> None:
    assert len(KEYS) == len(set(KEYS)), sorted(k for k in KEYS if KEYS.count(k) > 1)
