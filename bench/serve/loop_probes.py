"""How late the servers' event loops ran during a cell, from their own probes: the API's
``inferscale_api_event_loop_lag_seconds`` (every API process's, summed by its ``/metrics``) and
the runtime's ``inferscale_runtime_event_loop_lag_seconds``, histograms of each 50 ms wake-up's
delay. Scraped before and after the cell; the difference is the cell's.

A loop that wakes late holds up every stream and request it carries; one that wakes on time
while requests still queue says the wait is elsewhere (threads, the database, the runtime).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

API_SERIES = "inferscale_api_event_loop_lag_seconds"
RUNTIME_SERIES = "inferscale_runtime_event_loop_lag_seconds"


@dataclass
class Histogram:
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound (s) -> cumulative
    count: float = 0.0
    total_s: float = 0.0


def parse(exposition: str, series: str) -> Histogram:
    """``series``' histogram in a Prometheus text exposition (empty if absent)."""
    found = Histogram()
    for line in exposition.splitlines():
        if not line.startswith(series):
            continue
        name, value = line.rsplit(" ", 1)
        if name.startswith(f'{series}_bucket{{le="'):
            found.buckets[float(name.split('"')[1])] = float(value)
        elif name == f"{series}_count":
            found.count = float(value)
        elif name == f"{series}_sum":
            found.total_s = float(value)
    return found


def between(before: Histogram, after: Histogram) -> dict[str, float]:
    """The wake-ups in between: how many, their mean delay, and the share later than 10 and
    50 ms (bucket bounds of both probes)."""
    n = after.count - before.count
    if n <= 0:
        return {"n": 0.0}

    def late(bound: float) -> float:
        on_time = after.buckets.get(bound, 0.0) - before.buckets.get(bound, 0.0)
        return 100.0 * (n - on_time) / n

    mean_ms = 1000.0 * (after.total_s - before.total_s) / n
    return {"n": n, "mean_ms": mean_ms, "late_10ms_pct": late(0.01), "late_50ms_pct": late(0.05)}


class LoopProbes:
    def __init__(self, api: str, runtime: str | None = None, token: str = "") -> None:
        self.targets: dict[str, tuple[str, str, dict[str, str]]] = {
            "api": (f"{api.rstrip('/')}/metrics", API_SERIES, {})
        }
        if runtime:
            auth = {"Authorization": f"Bearer {token}"}
            self.targets["runtime"] = (f"{runtime.rstrip('/')}/metrics", RUNTIME_SERIES, auth)

    def snapshot(self) -> dict[str, Histogram]:
        taken = {}
        for name, (url, series, headers) in self.targets.items():
            try:
                text = httpx.get(url, headers=headers, timeout=10).text
            except httpx.HTTPError:
                text = ""  # a server without the probe or unreachable: no figure, no failure
            taken[name] = parse(text, series)
        return taken

    @staticmethod
    def cell(before: dict[str, Histogram], after: dict[str, Histogram]) -> dict[str, Any]:
        return {name: between(before[name], after[name]) for name in before}
