"""The servers' loop probes read from their Prometheus expositions (bench/serve/loop_probes.py)."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from bench.serve.loop_probes import API_SERIES, LoopProbes, between, parse
from bench.serve.report import _loops_table
from gpu_runtime.client.launch import RuntimeProcess
from tests.support import SERVICE_TOKEN

BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)  # the API's and the runtime's


@pytest.mark.unit
def test_a_cells_wake_ups_are_the_difference_of_two_scrapes() -> None:
    registry = CollectorRegistry()
    lag = Histogram(API_SERIES.removesuffix("_seconds"), "probe", unit="seconds",
                    buckets=BUCKETS, registry=registry)  # fmt: skip
    for delay in (0.0005, 0.2):  # before the cell
        lag.observe(delay)
    before = parse(generate_latest(registry).decode(), API_SERIES)
    for delay in (0.002, 0.002, 0.03, 0.08):  # the cell: two on time, one > 10 ms, one > 50 ms
        lag.observe(delay)
    after = parse(generate_latest(registry).decode(), API_SERIES)

    cell = between(before, after)

    assert cell["n"] == 4
    assert cell["mean_ms"] == pytest.approx(1000 * (0.002 + 0.002 + 0.03 + 0.08) / 4)
    assert cell["late_10ms_pct"] == pytest.approx(50.0)
    assert cell["late_50ms_pct"] == pytest.approx(25.0)
    assert between(after, after) == {"n": 0.0}
    assert parse("", API_SERIES).count == 0


@pytest.mark.unit
def test_the_report_shows_each_servers_loop_per_cell() -> None:
    loops = {"api": {"n": 40.0, "mean_ms": 3.25, "late_10ms_pct": 12.5, "late_50ms_pct": 2.5},
             "runtime": {"n": 0.0}}  # fmt: skip
    cell = {"users": 100, "k": 50, "mode": "kv", "server_loops": loops}

    lines = _loops_table([cell, {"users": 1, "k": 50, "mode": "peer"}])

    assert lines[-1] == "| 100 | 50 | kv | 3.2 ms, 12% / 2% | - |"  # the peer's cell: no row


@pytest.mark.db
def test_both_servers_probes_are_read_from_their_metrics(
    served_api: str, runtime_server: RuntimeProcess
) -> None:
    probes = LoopProbes(served_api, runtime_server.url, SERVICE_TOKEN)
    first = probes.snapshot()
    time.sleep(0.3)  # a few 50 ms wake-ups of each

    cell = probes.cell(first, probes.snapshot())

    assert cell["api"]["n"] >= 2 and cell["runtime"]["n"] >= 2, cell
    assert LoopProbes(served_api).snapshot().keys() == {"api"}  # no runtime URL: the API's only
