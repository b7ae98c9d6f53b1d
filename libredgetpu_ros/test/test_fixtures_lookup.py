"""Where the shared fixtures are looked up, and what a missing one says."""

from __future__ import annotations

import pytest

from libredgetpu_ros import fixtures


def test_override_is_used_and_a_wrong_override_is_an_error(tmp_path, monkeypatch) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "x.bmp").write_bytes(b"BM")
    monkeypatch.setenv(fixtures.ENV_VAR, str(tmp_path))
    assert fixtures.fixtures_dir() == tmp_path
    assert fixtures.fixture("images/x.bmp") == tmp_path / "images" / "x.bmp"
    with pytest.raises(fixtures.FixtureMissingError, match=r"'images/y.bmp' not found at .*override with"):
        fixtures.fixture("images/y.bmp")
    monkeypatch.setenv(fixtures.ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(fixtures.FixtureMissingError, match=r"nowhere.*FIXTURES is not a directory"):
        fixtures.fixtures_dir()


def test_default_is_shared_fixtures_beside_the_checkout(monkeypatch) -> None:
    monkeypatch.delenv(fixtures.ENV_VAR, raising=False)
    try:
        found = fixtures.fixtures_dir()
    except fixtures.FixtureMissingError as exc:  # only where no shared/ exists beside the checkout
        assert "shared/fixtures" in str(exc) and "set LIBREDGETPU_ROS_FIXTURES" in str(exc)
    else:
        assert found.parts[-2:] == ("shared", "fixtures")
