"""Per-tier load latency of the pool, kept as plain counts in the worker that owns the pool.

The worker half's process is not the one Prometheus scrapes: these counts (with the index's hit,
miss and eviction counters) travel in ``TieredKVPool.stats`` through the runtime's stats call,
and the runtime server publishes them.
"""

from __future__ import annotations

import threading
from typing import Any

from gpu_runtime.pool.entries import Tier

LOAD_BUCKETS_S = (1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5)


class PoolMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # tier -> [count per bucket (the last: above every bound)], seconds, observations
        self._buckets = {tier: [0] * (len(LOAD_BUCKETS_S) + 1) for tier in Tier}
        self._sums = dict.fromkeys(Tier, 0.0)
        self._counts = dict.fromkeys(Tier, 0)

    def loaded(self, tier: Tier, count: int, seconds_each: float) -> None:
        """``count`` facts found on ``tier``, fetched in ``seconds_each`` on average."""
        bucket = next((i for i, b in enumerate(LOAD_BUCKETS_S) if seconds_each <= b), -1)
        with self._lock:
            self._buckets[tier][bucket] += count
            self._sums[tier] += seconds_each * count
            self._counts[tier] += count

    def snapshot(self) -> dict[str, Any]:
        """``{"bounds_s": [...], "<tier>": {"buckets": [...], "sum_s": s, "count": n}}``."""
        with self._lock:
            out: dict[str, Any] = {"bounds_s": list(LOAD_BUCKETS_S)}
            for tier in Tier:
                out[tier.value] = {
                    "buckets": list(self._buckets[tier]),
                    "sum_s": self._sums[tier],
                    "count": self._counts[tier],
                }
            return out
