"""bench/_timing.py: the candidates of an interleaved timing take turns fairly."""

from __future__ import annotations

from pathlib import Path

from .._helpers import load_helper

REPO = Path(__file__).resolve().parents[3]


def test_interleaved_rounds_start_one_candidate_further_on_each_round() -> None:
    """No candidate always runs first (it ran in the same order every round): a, b, c; b, c, a; c, a, b."""
    timing = load_helper(REPO / "bench" / "_timing.py")
    calls: list[str] = []
    candidates = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = timing.interleaved_rounds_ns(candidates, rounds=4, calls=2)
    turns = [name for i, name in enumerate(calls) if i == 0 or calls[i - 1] != name]
    assert turns == list("abc" "bca" "cab" "abc")
    assert all(len(rounds) == 4 and all(len(r) == 2 for r in rounds) for rounds in times.values())
    assert calls.count("a") == 4 * 3  # per round: its warm-up call and the two timed ones
    assert timing.interleaved_rounds_ns({}, rounds=3, calls=2) == {}
