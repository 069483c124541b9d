"""``inferscale bench index``: what planning room costs in the residency index, with its LRU
heap and with a sort of the tier at every plan (the index as it was), side by side in one run.

The scenario is the serving path's worst case for the index: GPU and host tiers full (one slab
per fact, like a short fact on a real shape), and a chat that prefetches its k host facts, so
each promotion evicts the GPU tier's least recently used fact to the host, which evicts the
host's to disk. Also timed: admitting a new fact into the full tiers (an encoding job). No
engine, no torch: the index is pure bookkeeping.

    python -m gpu_runtime.bench index --out runs/index
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

    def _oldest_first(self, tier: Tier) -> Generator[Entry, None, None]:
        if not self.sorting:
            yield from super()._oldest_first(tier)
            return
        entries = [
            e for held in self._entries.values() for e in held.values()
            if e.tier is tier and not e.pins
        ]  # fmt: skip
        yield from sorted(entries, key=lambda e: e.last_use)


def _key(n: int) -> FactKey:
    return FactKey.for_fact(TENANT, f"f{n}", 1, CONFIG)


def _filled(kind: type[ResidencyIndex], per_tier: int) -> tuple[ResidencyIndex, list[FactKey]]:
    """Both memory tiers full, as many facts again on disk; the keys oldest first."""
    index = kind(per_tier * SLAB, per_tier * SLAB, SLAB)
    keys = [_key(n) for n in range(3 * per_tier)]
    if isinstance(index, SortingIndex):
        index.sorting = False
    for key in keys:
        index.admit(TENANT, key, SLAB)
    if isinstance(index, SortingIndex):
        index.sorting = True
    return index, keys


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
    out["prefetch_speedup"] = out["sort"]["prefetch"]["p50_ms"] / out["heap"]["prefetch"]["p50_ms"]
    out["admit_speedup"] = out["sort"]["admit"]["p50_ms"] / out["heap"]["admit"]["p50_ms"]
    return out


def _tier(index: ResidencyIndex, key: FactKey) -> Tier | None:
    entry = index.lookup(TENANT, key)
    return None if entry is None else entry.tier


def _markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| facts per tier | k | prefetch p50 ms: heap / sort | speed-up | admit p50 ms: heap / sort"
        " | speed-up |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        h, s = r["heap"], r["sort"]
        lines.append(
            f"| {r['facts_per_tier']:,} | {r['k']} | {h['prefetch']['p50_ms']:.3f} / "
            f"{s['prefetch']['p50_ms']:.3f} | {r['prefetch_speedup']:.1f}x | "
            f"{h['admit']['p50_ms']:.3f} / {s['admit']['p50_ms']:.3f} | {r['admit_speedup']:.1f}x |"
        )
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
