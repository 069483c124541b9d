"""A chat's laps add up to its time; a lap's splits sum repeats and are kept when a step raises."""

from __future__ import annotations

import time

import pytest

from backend.services.timing import Splits, Stopwatch


def test_laps_follow_each_other_and_add_up_to_the_time_since_the_start() -> None:
    started = time.perf_counter()
    clock = Stopwatch(started)
    time.sleep(0.01)
    clock.lap("a")
    time.sleep(0.01)
    clock.lap("b")
    clock.lap("a")  # a second lap of a name adds to it
    elapsed = (time.perf_counter() - started) * 1000
    assert clock.laps["a"] >= 10 and clock.laps["b"] >= 10
    assert sum(clock.laps.values()) == pytest.approx(elapsed, abs=1.0)


def test_splits_sum_repeats_and_keep_a_step_that_raised() -> None:
    splits = Splits()
    for _ in range(2):
        with splits.timed("user"):
            time.sleep(0.005)
    with pytest.raises(RuntimeError), splits.timed("rows"):
        time.sleep(0.005)
        raise RuntimeError("the step failed")
    assert splits.ms["user"] >= 10
    assert splits.ms["rows"] >= 5
