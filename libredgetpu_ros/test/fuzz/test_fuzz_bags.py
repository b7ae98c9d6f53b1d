"""CI fuzzing of the bag readers (``bag_targets.py``): 1,000 seeded mutations each of small MCAP and sqlite3
camera bags and of MCAP bags in rosbag2's per-message and per-file compression modes, read as ``process-bag``
and ``bag-repair`` read them; each case limited to 5 s and 1 GiB of
address space; only typed ``InputError``s may escape. The long runs are in docs/reliability.md section 5."""

from __future__ import annotations

import pytest

from .bag_targets import targets
from .harness import check_budget

CASES = 1000
pytestmark = pytest.mark.ros  # the frame decoders come with rclpy


@pytest.fixture(scope="module")
def bag_targets(tmp_path_factory):
    return targets(tmp_path_factory.mktemp("bag-seeds"))


@pytest.mark.parametrize("name", ["mcap_bag", "sqlite_bag", "compressed_bag"])
def test_bag_reader_fuzz_budget(bag_targets, name):
    check_budget(bag_targets[name], CASES, time_limit_s=5.0, memory_limit_mb=1024,
                 min_refused=CASES // 10, min_accepted=CASES // 10)
