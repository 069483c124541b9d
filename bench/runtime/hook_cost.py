"""What the connector's per-request Python costs for k facts, with warm and with cold caches.

    python -m bench.runtime.hook_cost --k 50 --out runs/hook-cost.json

The per-fact paths of a kv request, as the engine core runs them (issue 29's profile):
decoding the request's wire parameters (``decode_params``), the claim's look-up of every fact in
the durable index (``SchedulerHalf.num_new_matched_tokens`` over ``FactCatalog`` and
``StoredFacts``), pinning the facts in the tiered pool (``TieredKVPool.acquire`` and
``release``), and planning the fused loader's tables for them (``plan.plan_tables``: in full,
``plan``, and completing the run the prefetch hint planned ahead, ``plan_ahead``). Each is
timed back to back (warm: the same objects stay in the CPU's caches) and after evicting the
caches (cold: a 64 MiB array summed and 300,000 Python objects walked first), which is how the
engine core meets them: once per request, after a forward's worth of other work. On the H100
host of run 14 the hooks inside vLLM took about 4x what the same calls took warm in a plain
process; this measures how much of that the caches alone explain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpu_runtime.connector.catalog import FactCatalog
from gpu_runtime.connector.metadata import LoadPiece, LoadRequest
from gpu_runtime.connector.plan import plan_tables, rows_from_template, token_template
from gpu_runtime.connector.scheduler import SchedulerHalf
from gpu_runtime.connector.wire import decode_params, encode_params
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.store.disk.stored_facts import StoredFacts
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import EncodingConfig, FactKey, Span, TenantId

TENANT = TenantId("00000000-0000-4000-8000-0000000000aa")
TOKENS = 20  # tokens per fact (LoCoMo's mean is ~19)
BLOCK = 16


class Evictor:
    """Pushes the caches' contents out: a large array summed, many small objects walked."""

    def __init__(self) -> None:
        self.array = np.ones(64 << 20, dtype=np.uint8)  # more than an L2 and an L3 hold
        self.objects = [{"i": i} for i in range(300_000)]

    def __call__(self) -> None:
        self.array.sum()
        sum(len(o) for o in self.objects[::3])


def median_us(run: Callable[[], Any], repeats: int, before: Callable[[], None] | None) -> float:
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1e6)
    return statistics.median(times)


def measure(k: int, repeats: int) -> dict[str, Any]:
    config = EncodingConfig("bench", 0, 1)
    keys = [FactKey.for_fact(TENANT, f"fact-{i:05d}", 1, config) for i in range(k)]
    shape = (2, TOKENS, 2, 8)  # [layers, tokens, kv heads, head]: small, the costs are per fact
    with tempfile.TemporaryDirectory() as disk:
        pool = TieredKVPool.create(Path(disk), 1 << 26, 1 << 26, 2 * 8 * 2 * BLOCK)
        kv = FactKV.build(
            torch.randn(shape).bfloat16(), torch.randn(shape).bfloat16(), torch.arange(TOKENS)
        )
        pool.put_many(TENANT, [(key, kv) for key in keys])
        catalog = FactCatalog(StoredFacts(Path(disk)))
        scheduler = SchedulerHalf(BLOCK, catalog.available)
        spans = tuple(Span(key, i * TOKENS, TOKENS) for i, key in enumerate(keys))
        wire = encode_params(TENANT, config, spans)
        params = decode_params(wire)
        prompt_len = k * TOKENS + 10  # the facts, then the query
        if scheduler.num_new_matched_tokens(params, 0, prompt_len) != k * TOKENS:
            raise RuntimeError("the claim does not cover the facts")

        pinned = pool.acquire(TENANT, keys)  # held for the plan's path, released below
        assert pinned is not None
        pieces = tuple(LoadPiece(key, 0, TOKENS, i * TOKENS) for i, key in enumerate(keys))
        blocks = tuple(range(prompt_len // BLOCK + 1))
        load = LoadRequest("bench", TENANT, pieces, blocks, BLOCK, 0, k * TOKENS)
        ahead = token_template(pinned)  # as the prefetch hint's thread makes it
        if rows_from_template(load, ahead, 0) is None:
            raise RuntimeError("the load is not the run its template plans")

        def pin() -> None:
            if pool.acquire(TENANT, keys) is None:
                raise RuntimeError("a fact is not in the pool")
            pool.release(TENANT, keys)

        paths: dict[str, Callable[[], Any]] = {
            "decode": lambda: decode_params(wire),
            "claim": lambda: scheduler.num_new_matched_tokens(params, 0, prompt_len),
            "acquire_release": pin,
            "plan": lambda: plan_tables([load], [pinned], [None], shape[0], 1 << 20),
            "plan_ahead": lambda: plan_tables([load], [pinned], [ahead], shape[0], 1 << 20),
        }
        evict = Evictor()
        for run in paths.values():  # first use (key memos, index followers) out of the figures
            run()
        result = {
            name: {"warm_us": median_us(run, repeats, None),
                   "cold_us": median_us(run, repeats, evict)}
            for name, run in paths.items()
        }  # fmt: skip
        pool.release(TENANT, keys)
        return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runtime.hook_cost")
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    result = {"k": args.k, "repeats": args.repeats, "paths": measure(args.k, args.repeats)}
    for name, row in result["paths"].items():
        warm, cold = row["warm_us"], row["cold_us"]
        print(f"{name:<16} warm {warm:7.1f} µs   cold {cold:7.1f} µs   ({cold / warm:.1f}x)")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
