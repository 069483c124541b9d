"""A serving process's stall probes (``gpu_runtime/client/process_probes.py``), into real
Prometheus histograms of a registry of the test's own; and the collector's callback never
deadlocking a process that updates its metrics (prometheus_client's multiprocess mode, as the
API runs it)."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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
        assert _count(registry, "pauses", {"generation": "2"}) == 0  # queued, not observed
        probe.flush()
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


def test_the_loop_probe_flushes_the_collections_pauses() -> None:
    registry = CollectorRegistry()
    lag = Histogram("lag", "test", buckets=LAG_BUCKETS, registry=registry)
    pauses = Histogram("pauses", "test", ["generation"], buckets=GC_BUCKETS, registry=registry)
    probe = GcPauses(pauses)
    probe.install()

    async def collected() -> None:
        watching = asyncio.create_task(watch_event_loop(lag, probe.flush))
        gc.collect(1)
        await asyncio.sleep(0.12)  # two of the probe's wake-ups
        watching.cancel()

    try:
        asyncio.run(collected())
    finally:
        gc.callbacks.remove(probe._callback)
    assert _count(registry, "pauses", {"generation": "1"}) >= 1


# A collection on almost every allocation, and a new series a write (its key built and its file
# grown inside prometheus_client's lock): a collection starts with the lock held, and the old
# callback, observing its histogram there, waited for that lock forever.
_UPDATES_UNDER_COLLECTIONS = textwrap.dedent("""
    import gc
    from prometheus_client import Counter, Histogram
    from gpu_runtime.client.process_probes import GcPauses
    probe = GcPauses(Histogram("gc_pause_seconds", "pauses", ["generation"]))
    probe.install()
    writes = Counter("writes", "writes", ["n"])
    gc.set_threshold(1)
    for i in range(3000):
        writes.labels(str(i)).inc()
    gc.set_threshold(700)
    probe.flush()
    print(sum(s.value for m in probe.pauses.collect() for s in m.samples
              if s.name.endswith("_count")))
""")


def test_metric_updates_under_constant_collections_never_deadlock(tmp_path: Path) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _UPDATES_UNDER_COLLECTIONS], env=env, capture_output=True,
            text=True, timeout=60, cwd=Path(__file__).resolve().parents[3],
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("the process deadlocked: a collection's callback waited on a metric's lock")
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.strip()) > 100  # the pauses were all observed, after the loop
