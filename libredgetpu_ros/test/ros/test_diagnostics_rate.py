"""``diagnostics.RateMeter``: the rate every node shows in /diagnostics (fps_in / fps_out, state and command
rates), on explicit clocks: slow streams read their rate (before, under 2 events in 2 s read 0.0: a 0.4 Hz
camera looked dead), fast ones as before, a stopped stream decays then reads 0."""

from __future__ import annotations

import threading

import pytest
from libredgetpu_ros.ros.diagnostics import RateMeter


def _ticks(meter: RateMeter, start: float, period: float, count: int) -> float:
    for i in range(count):
        meter.tick(start + i * period)
    return start + (count - 1) * period  # the last event


@pytest.mark.parametrize("hz", [0.4, 0.1, 0.02])
def test_a_slow_stream_reads_its_rate_between_its_events(hz: float) -> None:
    meter = RateMeter()
    last = _ticks(meter, 100.0, 1 / hz, 6)
    for phase in (0.0, 0.3, 0.99):  # anywhere before the next event is due
        assert meter.rate(last + phase / hz) == pytest.approx(hz)


def test_a_fast_stream_reads_its_rate_and_keeps_only_its_window() -> None:
    meter = RateMeter()
    last = _ticks(meter, 0.0, 1 / 30, 300)
    assert meter.rate(last + 0.01) == pytest.approx(30.0)
    assert len(meter._times) <= 62  # 2 s of events, not all 300


def test_a_stopped_stream_decays_then_reads_zero() -> None:
    slow = RateMeter()
    last = _ticks(slow, 0.0, 2.5, 5)  # 0.4 Hz
    assert 0.0 < slow.rate(last + 5.0) < 0.4  # one event overdue: lower
    assert slow.rate(last + 7.4) > 0.0
    assert slow.rate(last + 7.6) == 0.0  # three intervals without an event
    fast = RateMeter()
    last = _ticks(fast, 0.0, 0.01, 500)  # 100 Hz: stale after the 2 s window, as before
    assert fast.rate(last + 1.9) > 0.0 and fast.rate(last + 2.1) == 0.0


def test_stale_is_bounded_by_max_stale_s_and_a_restart_forgets_the_pause() -> None:
    meter = RateMeter()
    last = _ticks(meter, 0.0, 50.0, 3)  # 0.02 Hz: 3 intervals would be 150 s
    assert meter.rate(last + 59.0) > 0.0 and meter.rate(last + 61.0) == 0.0
    one = RateMeter()
    one.tick(1.0)
    assert RateMeter().rate(5.0) == 0.0 and one.rate(1.5) == 0.0  # fewer than two events: no rate
    resumed = last + 600.0  # back after ten minutes at 10 Hz
    _ticks(meter, resumed, 0.1, 2)
    assert meter.rate(resumed + 0.15) == pytest.approx(10.0)  # not 2 events over 10 minutes


def test_one_writer_one_reader_threads() -> None:
    meter, stop, reading = RateMeter(), threading.Event(), threading.Event()
    rates: list[float] = []
    errors: list[BaseException] = []  # an exception in the reader would only be a pytest warning

    def read() -> None:
        try:
            while not stop.is_set():
                rates.append(meter.rate())
                reading.set()
        except BaseException as exc:
            errors.append(exc)
            reading.set()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert reading.wait(10.0), "the reader thread never ran"
        for _ in range(20_000):
            meter.tick()
    finally:
        stop.set()
        reader.join()
    assert not errors, errors
    assert rates and all(r >= 0.0 for r in rates) and meter.rate() > 0.0
