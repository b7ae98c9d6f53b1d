"""CI fuzzing of the model readers: 2,000 seeded mutations of real fixtures per reader, each case limited to
2 s and 1 GiB of address space; only typed ``InputError``s are allowed. Also checks that the harness
itself notices a hang, an allocation blow-up, an untyped error and a dead worker.

A longer run (see targets.py) is documented with its figures in docs/reliability.md.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from libredgetpu_ros.errors import InputError, ModelFormatError

from .harness import FuzzTarget, check_budget, fuzz, run_guarded
from .targets import targets

CASES = 2000
TIME_LIMIT_S, MEMORY_LIMIT_MB = 2.0, 1024  # per case; bench/bench_fuzz_budget.py runs the same budget


@pytest.fixture(scope="module")
def reader_targets(fixture_path):
    return targets(fixture_path)


@pytest.mark.parametrize("name", ["tflite", "flexbuffers", "darwinn"])
def test_reader_fuzz_budget(reader_targets, name):
    check_budget(reader_targets[name], CASES, time_limit_s=TIME_LIMIT_S, memory_limit_mb=MEMORY_LIMIT_MB,
                 min_refused=CASES // 10, min_accepted=CASES // 10)


def test_cases_are_reproducible(reader_targets):
    target = reader_targets["darwinn"]
    assert target.case(1, 17) == target.case(1, 17) != target.case(1, 18)


def _hang(_: bytes) -> None:
    time.sleep(30)


def _allocate(_: bytes) -> None:
    bytearray(4 << 30)  # 4 GiB: refused by the worker's address-space cap


def _die(_: bytes) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _refuse(_: bytes) -> None:
    raise ModelFormatError("bad field")


def _untyped(data: bytes) -> None:
    data[10**6]  # IndexError


@pytest.mark.parametrize("run,kind", [(_hang, "hang"), (_allocate, "untyped"), (_die, "crash"),
                                      (_refuse, "refused"), (_untyped, "untyped")])
def test_harness_classifies_outcomes(run, kind):
    outcome = run_guarded(run, b"x", (InputError,), time_limit_s=1.0, memory_limit_mb=256)
    assert outcome.kind == kind, outcome
    if run is _allocate:
        assert "MemoryError" in outcome.message


def test_harness_goes_on_after_a_hang(tmp_path):
    marker = tmp_path / "hung-once"

    def hang_once(_: bytes) -> None:  # the first case hangs, the next worker's cases do not
        if not marker.exists():
            marker.touch()
            time.sleep(30)

    report = fuzz(FuzzTarget("hang-once", [b"abcd"], hang_once, (InputError,)), 4, seed=3,
                  time_limit_s=0.5, memory_limit_mb=256)
    assert report.cases == 4 and not report.ok
    assert report.counts["hang"] == 1 and report.failures[0][:2] == (0, "hang")
    assert report.counts["accepted"] == 3
