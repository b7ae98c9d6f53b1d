"""Every shipped parameters file applies to its node whatever the launch calls it: `/**` keys only.

A file keyed `/**/flow:` was silently ignored by `flow.launch.py node_name:=front_flow` (the node came up
with its defaults); the launch files pass a params file to one node, so `/**` reaches exactly that node."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

CONFIG = Path(__file__).resolve().parents[2] / "config"
PARAMS_FILES = [p for p in sorted(CONFIG.glob("*.yaml")) if "ros__parameters" in p.read_text()]


def test_there_are_params_files() -> None:
    assert len(PARAMS_FILES) >= 10


@pytest.mark.parametrize("path", PARAMS_FILES, ids=lambda p: p.name)
def test_params_file_is_keyed_for_any_node_name(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert list(doc) == ["/**"], f"{path.name}: keys {list(doc)}; use '/**:' so node_name:= keeps the file"
    assert isinstance(doc["/**"]["ros__parameters"], dict)
