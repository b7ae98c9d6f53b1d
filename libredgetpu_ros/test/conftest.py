"""Shared pytest configuration: fixture lookup and the ``hardware`` marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from libredgetpu_ros.fixtures import FixtureMissingError
from libredgetpu_ros.fixtures import fixture as _fixture
from libredgetpu_ros.fixtures import fixtures_dir as _fixtures_dir


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-hardware", action="store_true", default=False,
                     help="run tests marked 'hardware' (needs a real accelerator attached)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-hardware"):
        return
    skip = pytest.mark.skip(reason="needs a real accelerator; run with --run-hardware")
    for item in items:
        if "hardware" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The shared fixtures folder; a missing folder fails the test (never skips)."""
    try:
        return _fixtures_dir()
    except FixtureMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def fixture_path():
    """``fixture_path("posenet/x.tflite")`` -> Path; a missing file fails the test with where it looked."""

    def lookup(relative: str) -> Path:
        try:
            return _fixture(relative)
        except FixtureMissingError as exc:
            pytest.fail(str(exc), pytrace=False)

    return lookup
