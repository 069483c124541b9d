"""Prometheus metrics of the API: one process's, or with several API processes all of theirs.

``inferscale api`` with ``INFERSCALE_API_WORKERS`` > 1 runs that many uvicorn processes behind
one port, and a scrape reaches any one of them: each would show only its own counts, a different
process's at each scrape. So the launcher sets prometheus_client's ``PROMETHEUS_MULTIPROC_DIR``
before the processes start: each then keeps its values in files there, and ``render`` sums every
process's (those of a process that exited included, so counters never go back).
"""

from __future__ import annotations

import os

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from gpu_runtime.client.inflight import Tracked
from gpu_runtime.client.process_probes import GC_BUCKETS, LAG_BUCKETS, GcPauses

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own variable

HTTP_REQUESTS = Counter(
    "inferscale_http_requests_total", "HTTP requests", ["method", "route", "status"]
)
CHAT_TTFT = Histogram(
    "inferscale_chat_ttft_seconds",
    "Time to first token of chat completions",
    ["mode"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
CHAT_MEMORIES = Histogram(
    "inferscale_chat_memories", "Memories used per chat", buckets=(0, 1, 5, 10, 20, 50, 100, 200)
)
TENANT_REQUESTS = Counter(
    "inferscale_tenant_requests_total",
    "Tenants' requests by outcome at their limits (admitted, limited: a 429)",
    ["tenant", "outcome"],
)
TENANT_TOKENS = Counter(
    "inferscale_tenant_tokens_total", "Tokens served to each tenant's chats", ["tenant", "kind"]
)

EVENT_LOOP_LAG = Histogram(
    "inferscale_api_event_loop_lag_seconds",
    "How late the API process's event loop woke a task that slept (every 50 ms): time its "
    "streams and requests waited for the loop",
    buckets=LAG_BUCKETS,
)
GC_PAUSE = Histogram(
    "inferscale_api_gc_pause_seconds", "The API process's garbage collections", ["generation"],
    buckets=GC_BUCKETS,
)  # fmt: skip
GC_PAUSES = GcPauses(GC_PAUSE)

# Requests in flight by stage (gpu_runtime/client/inflight.py): summed over the live processes.
IN_FLIGHT_NAME = "inferscale_api_requests_in_flight"
STUCK_NAME = "inferscale_api_stuck_requests"
IN_FLIGHT = Gauge(
    IN_FLIGHT_NAME, "Requests in flight by stage (the API's)", ["stage"],
    multiprocess_mode="livesum",
)  # fmt: skip
STUCK = Counter(
    STUCK_NAME,
    "Requests that made no progress for INFERSCALE_STUCK_REQUEST_S in a stage",
    ["stage"],
)
WATCH_FAILURES = Counter(
    "inferscale_api_inflight_watch_failures",
    "Rounds of the in-flight watcher that raised (logged; it goes on, but the gauges above and "
    "the stuck counts may be stale while they do)",
)
_published: set[str] = set()


def publish_in_flight(snapshot: dict[str, dict[str, float]]) -> None:
    """This process's counts (a stage it no longer has any request in goes back to 0)."""
    for stage in _published - snapshot.keys():
        IN_FLIGHT.labels(stage).set(0)
    for stage, entry in snapshot.items():
        IN_FLIGHT.labels(stage).set(entry["count"])
    _published.update(snapshot)


def count_stuck(tracked: Tracked) -> None:
    STUCK.labels(tracked.stage).inc()


def count_watch_failure() -> None:
    WATCH_FAILURES.inc()


def _registry() -> CollectorRegistry:
    """This process's series, or every API process's, summed."""
    if os.environ.get(MULTIPROCESS_DIR):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry
    return REGISTRY


def render() -> bytes:
    """The exposition of this process's series, or of every API process's, summed."""
    GC_PAUSES.flush()
    return generate_latest(_registry())


def requests_in_flight() -> dict[str, dict[str, float]]:
    """The API's requests in flight by stage and those reported stuck, over every API
    process (as last published, each second): ``{"in_flight": {stage: n}, "stuck_total":
    {stage: n}}``."""
    wanted = {IN_FLIGHT_NAME: "in_flight", STUCK_NAME + "_total": "stuck_total"}
    out: dict[str, dict[str, float]] = {"in_flight": {}, "stuck_total": {}}
    for metric in _registry().collect():
        for sample in metric.samples:
            if sample.name in wanted and sample.value:
                into = out[wanted[sample.name]]
                stage = sample.labels["stage"]
                into[stage] = into.get(stage, 0.0) + sample.value
    return out
