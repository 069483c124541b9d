"""The runtime process's own Prometheus series (``gpu_runtime/server/metrics.py``)."""

from __future__ import annotations

import httpx

from gpu_runtime.client.launch import RuntimeProcess
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
