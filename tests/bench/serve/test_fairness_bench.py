"""A tiny ``inferscale bench fairness`` against a running stack (API over HTTP, Celery worker,
runtime), so the harness cannot rot. No speed is asserted here (docs/benchmarks.md has the
measured run)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bench.serve.fairness import FairnessBench, markdown
from tests.support import ADMIN_KEY, SERVICE_TOKEN

pytestmark = pytest.mark.broker


def test_fairness_bench_measures_both_tenants_in_three_phases(
    served_api: str, celery_worker_process: Any, runtime_server: Any
) -> None:
    bench = FairnessBench(served_api, ADMIN_KEY, runtime_server.url, SERVICE_TOKEN, max_tokens=2)
    bench.prepare(log=lambda _: None)
    before = bench.gate()["slots"]
    phases = asyncio.run(bench.run(users=3, b_requests=2, wide_slots=64, flood_processes=2))
    assert [p["phase"].split(",")[0] for p in phases] == ["idle", "flood", "flood"]
    for phase in phases:
        assert phase["b_latency_ms"]["n"] == 2 and phase["5xx"] == 0
        parts = phase["b_parts_median_ms"]  # where B's time went, from the API's timings
        assert 0 < parts["engine_ttft"] < phase["b_ttft_ms"]["max"]
        assert parts["search"] > 0 and parts["auth_db"] > 0
    for flood in phases[1:]:  # A's users ran in two processes of their own
        assert flood["a_served"] > 0 and flood["requests_per_s"] > 0 and flood["a_errors"] == {}
        assert flood["b_loop_lag_ms"]["n"] > 0
        assert len(flood["gate"]["tenants"]) >= 2  # both tenants went through the gate
    assert phases[2]["gate"]["slots"] == 64
    assert bench.gate()["slots"] == before  # the bench puts the gate back
    text = markdown({"model": "m", "device": "cpu", "users": 3, "b_requests": 2, "k": 5,
                     "mode": "kv", "max_tokens": 2, "phases": phases})  # fmt: skip
    assert "B p50 / idle" in text and "A preempted" in text
    assert "Where B's TTFT went" in text and "| engine_ttft |" in text
