"""The ``slow`` list of conftest.py names tests that exist: a renamed or removed test would otherwise leave a
stale entry behind and its replacement would silently run in the fast lane (or a stale ``[id]`` would keep
nothing out of it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import SLOW_TESTS, collected_functions, listed_slow, matched_slow

TEST_DIR = Path(__file__).resolve().parent
ENTRY = re.compile(r"(?P<file>[\w/]+\.py)::(?P<function>test_\w+)(?:\[(?P<case>.+)\])?")


@pytest.mark.parametrize("entry", sorted(SLOW_TESTS))
def test_each_slow_entry_names_a_test_function(entry: str) -> None:
    match = ENTRY.fullmatch(entry)
    assert match, f"{entry!r} is not <file under test/>::<test function>[<case>]"
    path = TEST_DIR / match["file"]
    assert path.is_file(), f"{entry}: no file {path}"
    assert re.search(rf"^def {match['function']}\(", path.read_text(), re.MULTILINE), (
        f"{entry}: {match['file']} has no test function {match['function']}")


def test_each_slow_case_collected_in_this_session_is_marked() -> None:
    """An entry naming one parametrized case: where this run collected its function, the case was there."""
    stale = [entry for entry in SLOW_TESTS if entry.endswith("]") and entry not in matched_slow
             and entry.split("[", 1)[0] in collected_functions]
    assert not stale, f"no such parametrized case collected: {stale}"


class _Item:
    def __init__(self, path: Path, name: str, originalname: str) -> None:
        self.path, self.name, self.originalname = path, name, originalname


def test_listed_matches_every_case_of_a_function_or_the_one_case_named() -> None:
    ttc = TEST_DIR / "robotics" / "test_ttc.py"
    assert listed_slow(_Item(ttc, "test_no_contact_coming_gives_no_ttc[static]",
                              "test_no_contact_coming_gives_no_ttc"))
    assert not listed_slow(_Item(ttc, "test_the_model_ttc_is_span_over_scale_minus_one",
                                  "test_the_model_ttc_is_span_over_scale_minus_one"))
    pictures = TEST_DIR / "tools" / "test_pictures.py"
    function = "test_committed_picture_is_current"
    assert listed_slow(_Item(pictures, f"{function}[looming]", function))
    assert not listed_slow(_Item(pictures, f"{function}[bench_backends]", function))


def test_a_crash_is_never_rerun_a_stop_or_timeout_may_be() -> None:
    """CRASH_PATTERNS (the ros tests' rerun exceptions) catch the ways our tests report a crash, and not
    the exits a test's own stop or a timeout gives (SIGKILL -9, SIGINT -2, SIGTERM -15, 3)."""
    from .conftest import CRASH_PATTERNS

    def crash(text: str) -> bool:
        return any(re.search(pattern, text) for pattern in CRASH_PATTERNS)

    for text in ("round 2: exit code -11 after SIGINT to the group", "--- node (exit -6): /tmp/x.log",
                 "returncode=-7", "Fatal Python error: Segmentation fault", "Aborted (core dumped)"):
        assert crash(text), text
    for text in ("exit code -9 after SIGKILL", "--- node (exit -2)", "exit -15", "exit code 3",
                 "exit code -110", "no answer from /x/change_state"):
        assert not crash(text), text
