"""The runtime process's own Prometheus series (``gpu_runtime/server/metrics.py``)."""

from __future__ import annotations

import gc

import httpx
import pytest

from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.server import metrics
from tests.support import SERVICE_TOKEN


def _pauses(generation: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "inferscale_runtime_gc_pause_seconds_count", {"generation": generation}
    )
    return value or 0.0


@pytest.mark.unit
def test_every_collection_is_timed_by_generation() -> None:
    metrics.observe_gc_pauses()
    metrics.observe_gc_pauses()  # once per process, however often asked
    before = _pauses("2"), _pauses("0")

    gc.collect(2)
    gc.collect(0)

    assert (_pauses("2"), _pauses("0")) == (before[0] + 1, before[1] + 1)
    assert gc.callbacks.count(metrics._time_collection) == 1


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
