"""Per-tenant pool metrics: a Python API (``TieredKVPool.stats``) and Prometheus series."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from gpu_runtime.pool.index import Tier
from gpu_runtime.types import TenantId

HITS = Counter("inferscale_kv_hits_total", "KV reads served, by tier", ["tenant", "tier"])
MISSES = Counter("inferscale_kv_misses_total", "KV reads with nothing stored", ["tenant"])
EVICTIONS = Counter(
    "inferscale_kv_evictions_total", "Entries pushed off a tier", ["tenant", "tier"]
)
LOAD_SECONDS = Histogram(
    "inferscale_kv_load_seconds",
    "Time to fetch one fact's KV for injection, by the tier it was found on",
    ["tier"],
    buckets=(1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5),
)
RESIDENT = Gauge("inferscale_kv_facts", "Facts resident per tier", ["tenant", "tier"])
RESIDENT_BYTES = Gauge("inferscale_kv_bytes", "Bytes resident per tier", ["tenant", "tier"])


class PoolMetrics:
    def __init__(self) -> None:
        # Series by label values, looked up once: ``labels()`` validates and locks on every
        # call, and hits are counted on every request's critical path.
        self._series: dict[tuple[Any, ...], Any] = {}

    def _labelled(self, metric: Any, *values: str) -> Any:
        key = (metric, *values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = metric.labels(*values)
        return series

    def hit(self, tenant: TenantId, tier: Tier, seconds: float) -> None:
        self.hits(tenant, tier, 1, seconds)

    def hits(self, tenant: TenantId, tier: Tier, count: int, seconds_each: float) -> None:
        """A request's ``count`` facts found on ``tier``, fetched in ``seconds_each`` on average."""
        self._labelled(HITS, tenant.value, tier.value).inc(count)
        self._labelled(LOAD_SECONDS, tier.value).observe(seconds_each)

    def miss(self, tenant: TenantId) -> None:
        MISSES.labels(tenant.value).inc()

    def eviction(self, tenant: TenantId, tier: Tier) -> None:
        EVICTIONS.labels(tenant.value, tier.value).inc()

    def publish(self, tenant: TenantId | None, stats: dict[str, int]) -> None:
        label = tenant.value if tenant is not None else "all"
        for tier in Tier:
            RESIDENT.labels(label, tier.value).set(stats.get(f"{tier.value}_entries", 0))
            RESIDENT_BYTES.labels(label, tier.value).set(stats.get(f"{tier.value}_bytes", 0))
