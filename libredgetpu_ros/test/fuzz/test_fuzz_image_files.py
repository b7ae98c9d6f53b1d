"""CI fuzzing of the one image reader (image_targets.py; issue 30 item 2): 2,000 seeded mutations of a small
file of every format read and the header bombs, each case limited to 2 s and 1 GiB of address space; every
input decodes within the budget or is refused as ``BadImage``."""

from __future__ import annotations

from .harness import check_budget
from .image_targets import targets

CASES = 2000


def test_image_file_fuzz_budget() -> None:
    check_budget(targets()["image_file"], CASES, time_limit_s=2.0, memory_limit_mb=1024,
                 min_refused=CASES // 10, min_accepted=CASES // 20)
