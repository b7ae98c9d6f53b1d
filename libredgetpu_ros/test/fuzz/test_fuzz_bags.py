"""CI fuzzing of the bag readers (``bag_targets.py``): 1,000 seeded mutations each of small MCAP and sqlite3
camera bags and of MCAP bags in rosbag2's per-message and per-file compression modes, read as ``process-bag``
and ``bag-repair`` read them; each case limited to 5 s and 1 GiB of
address space; only typed ``InputError``s may escape. The long runs are in docs/reliability.md section 5."""

from __future__ import annotations

import pytest

from .bag_targets import targets
from .harness import fuzz

CASES = 1000
pytestmark = pytest.mark.ros  # the frame decoders come with rclpy


@pytest.fixture(scope="module")
def bag_targets(tmp_path_factory):
    return targets(tmp_path_factory.mktemp("bag-seeds"))


@pytest.mark.parametrize("name", ["mcap_bag", "sqlite_bag", "compressed_bag"])
def test_bag_reader_fuzz_budget(bag_targets, name):
    report = fuzz(bag_targets[name], CASES, seed=1, time_limit_s=5.0, memory_limit_mb=1024)
    print(report.summary())
    assert report.cases == CASES
    assert report.ok, report.summary()
    counts = report.counts  # both paths exercised, or the target is not testing the readers
    assert counts["refused"] > CASES // 10 and counts["accepted"] > CASES // 10, report.summary()
