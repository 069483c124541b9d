"""Connector hook timing: a no-op unless enabled, and counts calls and time when it is."""

from __future__ import annotations

import time

import pytest

from gpu_runtime.connector import timing

pytestmark = pytest.mark.unit


def test_disabled_timing_returns_the_function_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "ENABLED", False)

    def hook() -> int:
        return 1

    assert timing.timed("hook")(hook) is hook


def test_enabled_timing_counts_calls_and_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "ENABLED", True)
    timing.reset()

    @timing.timed("sleepy")
    def sleepy(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    assert sleepy(0.01) == 0.01 and sleepy(0.0) == 0.0
    row = timing.snapshot()["sleepy"]
    assert row["calls"] == 2 and row["total_ms"] >= 10.0
    timing.reset()
    assert timing.snapshot() == {}


def test_a_section_is_timed_only_when_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    timing.reset()
    monkeypatch.setattr(timing, "ENABLED", False)
    with timing.section("load_plan"):
        time.sleep(0.005)
    assert timing.snapshot() == {}
    monkeypatch.setattr(timing, "ENABLED", True)
    for _ in range(2):
        with timing.section("load_plan"):
            time.sleep(0.005)
    row = timing.snapshot()["load_plan"]
    assert row["calls"] == 2 and row["total_ms"] >= 10.0
    timing.reset()


def test_the_threads_cpu_time_tells_waiting_from_computing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "ENABLED", True)
    timing.reset()
    with timing.section("waiting"):
        time.sleep(0.02)
    with timing.section("computing"):
        end = time.perf_counter() + 0.02
        while time.perf_counter() < end:
            pass
    rows = timing.snapshot()
    assert rows["waiting"]["total_ms"] >= 20.0 and rows["waiting"]["cpu_ms"] < 5.0
    assert rows["computing"]["cpu_ms"] >= 0.5 * rows["computing"]["total_ms"]
    timing.reset()
