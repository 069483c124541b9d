"""``inferscale bench index``: what planning room costs in the residency index, with its LRU
heap and with a sort of the tier at every plan (the index as it was), side by side in one run.

The scenario is the serving path's worst case for the index: GPU and host tiers full (one slab
per fact, like a short fact on a real shape), and a chat that prefetches its k host facts, so
each promotion evicts the GPU tier's least recently used fact to the host, which evicts the
host's to disk. Also timed: admitting a new fact into the full tiers (an encoding job). No
engine, no torch: the index is pure bookkeeping. And with per-tenant quotas: ten tenants at
their quota, the last filled admitting more (it evicts its own LRU facts, the tier's newest).

    python -m bench index --out runs/index
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable, Generator
from functools import partial
from pathlib import Path
from typing import Any

from gpu_runtime.pool.entries import Entry, Tier
from gpu_runtime.pool.index import ResidencyIndex
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

SLAB = 4096
TENANT = TenantId("bench")
CONFIG = EncodingConfig("bench", 0, 1)


class SortingIndex(ResidencyIndex):
    """The index before the LRU heap: every plan sorts the tier's unpinned entries.

    ``sorting = False`` plans with the heap instead (the same order, as the tests check), so
    filling a large index for the benchmark does not take the sort's quadratic time."""

    sorting = True

    def _oldest_first(
        self, tier: Tier, tenant: TenantId | None = None
    ) -> Generator[Entry, None, None]:
        if not self.sorting:
            yield from super()._oldest_first(tier, tenant)
            return
        entries = [
            e for held in self._entries.values() for e in held.values()
            if e.tier is tier and not e.pins
        ]  # fmt: skip
        # As it was: a tenant's LRU entries were found by walking the whole sorted tier.
        yield from (e for e in sorted(entries, key=lambda e: e.last_use)
                    if tenant in (None, e.key.tenant))  # fmt: skip


def _key(n: int, tenant: TenantId = TENANT) -> FactKey:
    return FactKey.for_fact(tenant, f"f{n}", 1, CONFIG)


def _admit_all(index: ResidencyIndex, keys: list[FactKey]) -> None:
    """Admits without timing; a ``SortingIndex`` plans with the heap meanwhile (same order)."""
    if isinstance(index, SortingIndex):
        index.sorting = False
    for key in keys:
        index.admit(key.tenant, key, SLAB)
    if isinstance(index, SortingIndex):
        index.sorting = True


def _filled(kind: type[ResidencyIndex], per_tier: int) -> tuple[ResidencyIndex, list[FactKey]]:
    """Both memory tiers full, as many facts again on disk; the keys oldest first."""
    index = kind(per_tier * SLAB, per_tier * SLAB, SLAB)
    keys = [_key(n) for n in range(3 * per_tier)]
    _admit_all(index, keys)
    return index, keys


def _at_quota(kind: type[ResidencyIndex], per_tier: int, repeats: int) -> dict[str, float]:
    """Ten tenants, each at its quota (a tenth of each tier); the last filled admits more, so
    every admit evicts its own least recently used fact, the newest ones of the tier."""
    quota = per_tier // 10 * SLAB
    index = kind(per_tier * SLAB, per_tier * SLAB, SLAB, quota, quota)
    tenants = [TenantId(f"t{i}") for i in range(10)]
    _admit_all(index, [_key(n, t) for t in tenants for n in range(2 * per_tier // 10)])
    fresh = iter(range(per_tier, 10**9))
    last = tenants[-1]
    return _timed(
        lambda: [_key(next(fresh), last)], lambda new: index.admit(last, new[0], SLAB), repeats
    )


def _timed(
    prepare: Callable[[], list[FactKey]], action: Callable[[list[FactKey]], object], repeats: int
) -> dict[str, float]:
    """``action`` timed alone, on what an untimed ``prepare`` picked."""
    samples = []
    for _ in range(repeats):
        keys = prepare()
        start = time.perf_counter()
        action(keys)
        samples.append((time.perf_counter() - start) * 1000)
    return {"p50_ms": statistics.median(samples), "max_ms": max(samples)}


def _measure_one(
    kind: type[ResidencyIndex], per_tier: int, k: int, repeats: int, seed: int
) -> dict[str, Any]:
    index, keys = _filled(kind, per_tier)
    rng, fresh = random.Random(seed), iter(range(len(keys), 10**9))

    def host_facts() -> list[FactKey]:
        on_host = [key for key in rng.sample(keys, 4 * k) if _tier(index, key) is Tier.HOST]
        return on_host[:k]

    def new_fact() -> list[FactKey]:
        return [_key(next(fresh))]

    return {
        "prefetch": _timed(host_facts, partial(index.prefetch, TENANT), repeats),
        "admit": _timed(new_fact, lambda new: index.admit(TENANT, new[0], SLAB), repeats),
    }


def measure(per_tier: int, k: int, repeats: int, seed: int = 0) -> dict[str, Any]:
    """One tier size: prefetch of k host facts and one admit, with the heap and the sort."""
    out: dict[str, Any] = {"facts_per_tier": per_tier, "k": k}
    for name, kind in (("heap", ResidencyIndex), ("sort", SortingIndex)):
        out[name] = _measure_one(kind, per_tier, k, repeats, seed)
        out[name]["admit_at_quota"] = _at_quota(kind, per_tier, repeats)
    out["prefetch_speedup"] = out["sort"]["prefetch"]["p50_ms"] / out["heap"]["prefetch"]["p50_ms"]
    out["admit_speedup"] = out["sort"]["admit"]["p50_ms"] / out["heap"]["admit"]["p50_ms"]
    out["admit_at_quota_speedup"] = (
        out["sort"]["admit_at_quota"]["p50_ms"] / out["heap"]["admit_at_quota"]["p50_ms"]
    )
    return out


def _tier(index: ResidencyIndex, key: FactKey) -> Tier | None:
    entry = index.lookup(TENANT, key)
    return None if entry is None else entry.tier


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| facts per tier | k | prefetch p50 ms: heap / sort | speed-up | admit p50 ms: heap / sort"
        " | speed-up | admit at quota p50 ms: heap / sort | speed-up |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [f"{r['facts_per_tier']:,}", str(r["k"])]
        for action in ("prefetch", "admit", "admit_at_quota"):
            heap, sort = r["heap"][action]["p50_ms"], r["sort"][action]["p50_ms"]
            cells += [f"{heap:.3f} / {sort:.3f}", f"{r[action + '_speedup']:.1f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale bench index")
    parser.add_argument("--sizes", default="1000,10000,50000", help="facts per memory tier")
    parser.add_argument("--k", type=int, default=50, help="host facts a chat prefetches")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    rows = [measure(int(n), args.k, args.repeats) for n in args.sizes.split(",") if n]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.json").write_text(json.dumps(rows, indent=1))
    (out / "index.md").write_text(_markdown(rows))
    print(_markdown(rows), end="", flush=True)
    return 0
