"""The runtime process's own Prometheus series (``gpu_runtime/server/metrics.py``)."""

from __future__ import annotations

import httpx

from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.server.metrics import render
from tests.support import SERVICE_TOKEN


def test_the_runtime_serves_its_gc_pauses(runtime_server: RuntimeProcess) -> None:
    text = httpx.get(
        f"{runtime_server.url}/metrics", headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}
    ).text
    assert 'inferscale_runtime_gc_pause_seconds_count{generation="0"}' in text


def test_the_runtime_serves_its_event_loop_lag(runtime_server: RuntimeProcess) -> None:
    text = httpx.get(
        f"{runtime_server.url}/metrics", headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}
    ).text
    counts = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("inferscale_runtime_event_loop_lag_seconds_count")
    ]
    assert counts and counts[0] > 0  # the probe wakes every 50 ms from the start


def test_the_fused_loaders_plans_are_series_per_rank() -> None:
    """What each worker's stats say its fused loader served (``FusedLoader.plans``), as the
    operator's scrape shows it; a worker without the fused kernel (CPU) adds no series."""
    workers = [{"fused_loads": {"run": 7, "planned": 2, "declined": 1}}, {}]
    text = render(workers, {}).decode()
    for plan, count in (("run", 7), ("planned", 2), ("declined", 1)):
        assert f'inferscale_kv_fused_loads{{plan="{plan}",rank="0"}} {count}.0' in text
    assert 'rank="1"' not in text.split("inferscale_kv_fused_loads", 1)[1].split("# HELP")[0]
