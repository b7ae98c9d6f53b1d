"""CI fuzzing of the TpuLang readers (issue 21): 1,000 seeded mutations each of the conformance MLIR files
(bytes, and their numbers; then parse, memory plan, execute, print back) and npz files (read whole and by
name), each case limited to 5 s
and 1 GiB of address space; only typed ``InputError``s are allowed. The long run (100,000 cases per reader)
is recorded in docs/reliability.md."""

from __future__ import annotations

import pytest

from .harness import check_budget
from .tpulang_targets import targets

CASES = 1000


@pytest.fixture(scope="module")
def tpulang_targets(fixture_path):
    return targets(fixture_path)


@pytest.mark.parametrize("name", ["tpulang_mlir", "tpulang_mlir_numbers", "tpulang_npz"])
def test_tpulang_reader_fuzz_budget(tpulang_targets, name):
    check_budget(tpulang_targets[name], CASES, time_limit_s=5.0, memory_limit_mb=1024,
                 min_refused=CASES // 2, min_accepted=CASES // 100)
