"""Prometheus series of the runtime process: its requests, and the pool's residency and load
latency, which live in the worker processes and are fetched when Prometheus scrapes."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from gpu_runtime.client.inflight import Tracked
from gpu_runtime.client.process_probes import GC_BUCKETS, LAG_BUCKETS, GcPauses

REGISTRY = CollectorRegistry()
REQUESTS = Counter(
    "inferscale_runtime_requests_total", "Generate requests by mode and outcome",
    ["mode", "outcome"], registry=REGISTRY,
)  # fmt: skip
TTFT = Histogram(
    "inferscale_runtime_ttft_seconds", "Engine time to first token (in the runtime)", ["mode"],
    buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10), registry=REGISTRY,
)  # fmt: skip
TOKENS = Counter(
    "inferscale_runtime_prompt_tokens_total", "Prompt tokens by how they reached the cache",
    ["how"], registry=REGISTRY,
)  # fmt: skip
ENCODED = Counter("inferscale_runtime_encoded_facts_total", "Facts encoded", registry=REGISTRY)
GC_PAUSE = Histogram(
    "inferscale_runtime_gc_pause_seconds", "The process's garbage collections (each stops the "
    "event loop and its streams)", ["generation"], buckets=GC_BUCKETS, registry=REGISTRY,
)  # fmt: skip
EVENT_LOOP_LAG = Histogram(
    "inferscale_runtime_event_loop_lag_seconds",
    "How late the runtime's event loop woke a task that slept (every 50 ms): time every stream, "
    "embedding and request waited for the loop", buckets=LAG_BUCKETS, registry=REGISTRY,
)  # fmt: skip
GC_PAUSES = GcPauses(GC_PAUSE)
STUCK = Counter(
    "inferscale_runtime_stuck_requests", "Requests that made no progress for stuck_request_s "
    "in a stage", ["stage"], registry=REGISTRY,
)  # fmt: skip


WATCH_FAILURES = Counter(
    "inferscale_runtime_inflight_watch_failures", "Rounds of the in-flight watcher that raised "
    "(logged; it goes on)", registry=REGISTRY,
)  # fmt: skip


def count_stuck(tracked: Tracked) -> None:
    STUCK.labels(tracked.stage).inc()


def count_watch_failure() -> None:
    WATCH_FAILURES.inc()


def render(
    workers: list[dict[str, Any]],
    fairness: dict[str, dict[str, float]],
    in_flight: dict[str, dict[str, float]] | None = None,
) -> bytes:
    """The process's series plus the pool's, from the workers' stats of this scrape, each
    tenant's side of the fair gate (``FairGate.snapshot()``) and the requests in flight by
    stage (``InFlight.snapshot()``)."""
    GC_PAUSES.flush()
    pool = CollectorRegistry()
    pool.register(_PoolCollector(workers))
    pool.register(_FairnessCollector(fairness))
    pool.register(_InFlightCollector(in_flight or {}))
    return generate_latest(REGISTRY) + generate_latest(pool)


class _InFlightCollector:
    def __init__(self, in_flight: dict[str, dict[str, float]]) -> None:
        self.in_flight = in_flight

    def collect(self) -> Any:
        count = GaugeMetricFamily(
            "inferscale_runtime_requests_in_flight", "Requests in flight by stage", labels=["stage"]
        )
        oldest = GaugeMetricFamily(
            "inferscale_runtime_request_stage_oldest_seconds",
            "The longest any request in flight has been in its stage", labels=["stage"],
        )  # fmt: skip
        for stage, entry in sorted(self.in_flight.items()):
            count.add_metric([stage], entry["count"])
            oldest.add_metric([stage], entry["oldest_s"])
        yield count
        yield oldest


class _FairnessCollector:
    SERIES = {
        "running": ("gauge", "Requests of the tenant in the engine now"),
        "waiting": ("gauge", "Requests of the tenant waiting for an engine slot"),
        "admitted": ("counter", "Requests admitted to the engine"),
        "queued": ("counter", "Admissions that waited for a slot"),
        "queue_wait_s": ("counter", "Seconds admissions waited for a slot, in total"),
        "preempted": ("counter", "Requests that gave their slot back when contention began"),
        "prefill_tokens": ("counter", "Prompt tokens served"),
        "decode_tokens": ("counter", "Generated tokens served"),
    }

    def __init__(self, fairness: dict[str, dict[str, float]]) -> None:
        self.fairness = fairness

    def collect(self) -> Any:
        from prometheus_client.core import CounterMetricFamily

        for name, (kind, text) in self.SERIES.items():
            metric = f"inferscale_runtime_tenant_{name.removesuffix('_s')}"
            if name == "queue_wait_s":
                metric = "inferscale_runtime_tenant_queue_wait_seconds"
            family: Any = (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
                metric, text, labels=["tenant"]
            )
            for tenant, row in self.fairness.items():
                family.add_metric([tenant], row[name])
            yield family


class _PoolCollector:
    def __init__(self, workers: list[dict[str, Any]]) -> None:
        self.workers = workers

    def collect(self) -> Any:
        facts = GaugeMetricFamily("inferscale_kv_facts", "Facts resident", labels=["rank", "tier"])
        held = GaugeMetricFamily("inferscale_kv_bytes", "Bytes resident", labels=["rank", "tier"])
        counts = GaugeMetricFamily(
            "inferscale_kv_events", "Pool hits, misses and evictions since start",
            labels=["rank", "event"],
        )  # fmt: skip
        plans = GaugeMetricFamily(
            "inferscale_kv_fused_loads", "Steps whose loads the fused kernel served since start, "
            "by plan: run (the kernel's run mode), planned (per token), declined (PyTorch path)",
            labels=["rank", "plan"],
        )  # fmt: skip
        for rank, stats in enumerate(self.workers):
            for plan, count in stats.get("fused_loads", {}).items():
                plans.add_metric([str(rank), plan], count)
            for tier in ("gpu", "host", "disk"):
                facts.add_metric([str(rank), tier], stats.get(f"{tier}_entries", 0))
                held.add_metric([str(rank), tier], stats.get(f"{tier}_bytes", 0))
            # the durable store: every fact the memory tiers hold is also there
            facts.add_metric([str(rank), "durable"], stats.get("disk_facts", 0))
            held.add_metric([str(rank), "durable"], stats.get("disk_bytes", 0))
            for event in ("gpu_hits", "host_hits", "disk_hits", "misses", "evictions"):
                counts.add_metric([str(rank), event], stats.get(event, 0))
        yield from (facts, held, counts, plans)
        latency = self.workers[0].get("load_latency") if self.workers else None
        if latency:
            family = HistogramMetricFamily(
                "inferscale_kv_load_seconds", "Time to fetch a fact for injection, by tier",
                labels=["tier"],
            )  # fmt: skip
            for tier in ("gpu", "host", "disk"):
                row = latency[tier]
                cumulative, buckets = 0, []
                bounds = [*latency["bounds_s"], float("inf")]
                for bound, count in zip(bounds, row["buckets"], strict=True):
                    cumulative += count
                    buckets.append((str(bound) if bound != float("inf") else "+Inf", cumulative))
                family.add_metric([tier], buckets, row["sum_s"])
            yield family
