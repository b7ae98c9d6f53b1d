"""CI fuzzing of the user-text readers (text_targets.py): seeded mutations of the Femtosense fixtures and
crafted alias / depth / encoding cases, each case limited to 2 s and 512 MiB of address space; only typed
``InputError``s may come out. The long run (100,000 cases per target) is in docs/reliability.md."""

from __future__ import annotations

import pytest

from .harness import check_budget
from .text_targets import targets

CASES = {"iospec": 4000, "iospec_tokens": 2000, "yaml": 2000, "json": 2000}
TIME_LIMIT_S, MEMORY_LIMIT_MB = 2.0, 512  # per case; bench/bench_fuzz_budget.py --suite text runs the same


@pytest.fixture(scope="module")
def text_targets(fixture_path):
    return targets(fixture_path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_text_reader_fuzz_budget(text_targets, name):
    # Both paths exercised (byte mutations break most YAML at once: a few % stay valid IOSpecs).
    check_budget(text_targets[name], CASES[name], time_limit_s=TIME_LIMIT_S, memory_limit_mb=MEMORY_LIMIT_MB,
                 min_refused=CASES[name] // 40, min_accepted=CASES[name] // 40)
