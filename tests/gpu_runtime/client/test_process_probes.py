"""A serving process's stall probes (``gpu_runtime/client/process_probes.py``), into real
Prometheus histograms of a registry of the test's own."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
from prometheus_client import CollectorRegistry, Histogram

from gpu_runtime.client.process_probes import GC_BUCKETS, LAG_BUCKETS, GcPauses, watch_event_loop

pytestmark = pytest.mark.unit


def _count(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    return registry.get_sample_value(f"{name}_count", labels or {}) or 0.0


def test_every_collection_is_timed_by_generation() -> None:
    registry = CollectorRegistry()
    pauses = Histogram("pauses", "test", ["generation"], buckets=GC_BUCKETS, registry=registry)
    probe = GcPauses(pauses)
    probe.install()
    probe.install()  # once per process, however often asked
    try:
        gc.collect(2)
        gc.collect(0)
        assert _count(registry, "pauses", {"generation": "2"}) == 1
        assert _count(registry, "pauses", {"generation": "0"}) == 1
        assert gc.callbacks.count(probe._callback) == 1
    finally:
        gc.callbacks.remove(probe._callback)


def test_the_loop_probe_records_a_loop_held_up() -> None:
    registry = CollectorRegistry()
    lag = Histogram("lag", "test", buckets=LAG_BUCKETS, registry=registry)

    async def held_up() -> None:
        watching = asyncio.create_task(watch_event_loop(lag))
        await asyncio.sleep(0.01)  # the probe asleep, due in 50 ms
        time.sleep(0.3)  # the loop blocked past it, as a long callback would
        await asyncio.sleep(0.01)
        watching.cancel()

    asyncio.run(held_up())

    late = _count(registry, "lag") - (registry.get_sample_value("lag_bucket", {"le": "0.1"}) or 0)
    assert _count(registry, "lag") >= 1
    assert late == 1  # the one wake-up the blocked loop delayed by ~250 ms
