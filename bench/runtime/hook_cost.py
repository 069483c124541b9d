"""What the connector's per-request Python costs for k facts, with warm and with cold caches.

    python -m bench.runtime.hook_cost --k 50 --out runs/hook-cost.json

The per-fact paths of a kv request: in the runtime's front end, the generate body parsed and
its segment built, validated and written for the engine core (``front_spans``: the segment as
span objects, protocol revisions 1-6; ``front_rows``: as rows, revision 7); then as the engine
core runs them (issue 29's profile): decoding the request's wire parameters
(``decode_params``), the claim's look-up of every fact in the durable index
(``SchedulerHalf.num_new_matched_tokens`` over ``FactCatalog`` and ``StoredFacts``), pinning
the facts in the tiered pool (``TieredKVPool.acquire`` and ``release``), finding what the
prefetch hint pinned ahead (``take``, ``take_distinct``), and planning the fused loader's tables
for them (``plan.plan_tables``: in full, ``plan``, and completing the run the prefetch hint
planned ahead, ``plan_ahead``; the kernel's run mode, which takes that run's rows as they are,
``plan_run``). Each is timed back to back (warm: the same objects stay in the
CPU's caches) and after evicting the caches (cold: a 64 MiB array summed and 300,000 Python
objects walked first), which is how the engine core meets them: once per request, after a
forward's worth of other work. On the H100 host of run 14 the hooks inside vLLM took about 4x
what the same calls took warm in a plain process; this measures how much of that the caches
alone explain.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpu_runtime.client import protocol as p
from gpu_runtime.connector.ahead import PinnedAhead, Taken
from gpu_runtime.connector.catalog import FactCatalog
from gpu_runtime.connector.hints import HintDecoder, hint_messages
from gpu_runtime.connector.metadata import LoadPiece, LoadRequest
from gpu_runtime.connector.plan import plan_run, plan_tables, rows_from_template, token_template
from gpu_runtime.connector.scheduler import SchedulerHalf
from gpu_runtime.connector.wire import decode_params, encode_params, segment_params
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.server import routes
from gpu_runtime.store.disk.stored_facts import StoredFacts
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import EncodingConfig, FactKey, FactKeys, MemorySegment, Span, TenantId

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


@dataclass
class _Runtime:
    """What the generate route reads of the runtime to build a request's segment."""

    encoding_model: str
    fact_keys: FactKeys


def front_paths(
    keys: list[FactKey], spans: tuple[Span, ...], prompt_len: int
) -> dict[str, Callable[[], Any]]:
    """The runtime's front end for one kv request, up to the engine: the body parsed, its
    segment built and validated, the engine core's parameters written and the layout hashed;
    the segment as ``spans`` (revisions 1-6) and as ``rows`` (revision 7)."""
    config = keys[0].config
    runtime = _Runtime(config.model, FactKeys(config.model))
    segment = MemorySegment(TENANT, config, spans)
    rows = p.segment_model(segment)
    request = p.GenerateRequest(
        tenant=TENANT.value, token_ids=list(range(prompt_len)), mode="kv", segment=rows
    )
    bodies = {
        "front_spans": p.wire(p.for_revision(request, 6)).encode(),
        "front_rows": p.wire(request).encode(),
    }

    def front(body: bytes) -> Callable[[], Any]:
        def run() -> Any:
            parsed = p.GenerateRequest.model_validate_json(body)
            assert parsed.segment is not None
            built = routes.segment_of(runtime, TENANT, parsed.segment)  # type: ignore[arg-type]
            return segment_params(built), built.layout_digest()

        return run

    return {name: front(body) for name, body in bodies.items()}


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
        if (
            rows_from_template(load, ahead, 0) is None
            or plan_run(load, pinned, ahead, shape[0], 1 << 20) is None
        ):
            raise RuntimeError("the load is not the run its template plans")  # fmt: skip

        def pin() -> None:
            if pool.acquire(TENANT, keys) is None:
                raise RuntimeError("a fact is not in the pool")
            pool.release(TENANT, keys)

        paths: dict[str, Callable[[], Any]] = {
            **front_paths(keys, spans, prompt_len),
            "decode": lambda: decode_params(wire),
            "claim": lambda: scheduler.num_new_matched_tokens(params, 0, prompt_len),
            "acquire_release": pin,
            "plan": lambda: plan_tables([load], [pinned], [None], shape[0], 1 << 20),
            "plan_ahead": lambda: plan_tables([load], [pinned], [ahead], shape[0], 1 << 20),
            "plan_run": lambda: plan_run(load, pinned, ahead, shape[0], 1 << 20),
        }
        assert params is not None and params.inject is not None
        setups = take_paths(pool, [span.key for span in params.inject.spans], paths)
        evict = Evictor()
        for name, run in paths.items():  # first use (key memos, index followers) out of figures
            setup = setups.get(name)
            if setup is not None:
                setup()
            run()
        result = {}
        for name, run in paths.items():
            setup = setups.get(name)
            result[name] = {
                "warm_us": median_us(run, repeats, setup),
                "cold_us": median_us(run, repeats, _then(setup, evict)),
            }
        pool.release(TENANT, keys)
        return result


def _then(first: Callable[[], None] | None, second: Callable[[], None]) -> Callable[[], None]:
    if first is None:
        return second

    def both() -> None:
        first()
        second()

    return both


def take_paths(
    pool: TieredKVPool, keys: list[FactKey], paths: dict[str, Callable[[], Any]]
) -> dict[str, Callable[[], None]]:
    """The fused loader's pinning when a prefetch hint pinned the facts ahead (``load_acquire``
    with ``FusedLoader._acquire``'s key handling): its pieces' keys as the engine core decoded
    them (``keys``), the hint's keys as the worker's hint thread decoded them. ``take``: both
    from the process's keys (``types.process_keys``); ``take_distinct``: the hint's built apart
    (equal keys, other objects), as before the two shared them. Adds the paths to ``paths`` and
    returns each one's untimed set-up: the pins of the last take released, the hint again."""
    pieces = [LoadPiece(key, 0, TOKENS, i * TOKENS) for i, key in enumerate(keys)]
    message = hint_messages(TENANT, keys)[0]
    distinct = FactKeys(keys[0].model)
    hints = {
        "take": HintDecoder()(message)[1],
        "take_distinct": [distinct.get(TENANT, k.fact_id, k.fact_version, k.window,
                                       k.encoding_version) for k in keys],
    }  # fmt: skip
    setups: dict[str, Callable[[], None]] = {}
    for name, hinted in hints.items():
        ahead = PinnedAhead(pool.acquire, pool.release)
        taken: list[Taken] = []

        def setup(ahead: PinnedAhead = ahead, hinted: list[FactKey] = hinted,
                  taken: list[Taken] = taken) -> None:  # fmt: skip
            while taken:
                pool.release(TENANT, taken.pop().keys)
            if not ahead.hint(TENANT, hinted):
                raise RuntimeError("the hint pinned nothing")

        def take(ahead: PinnedAhead = ahead, taken: list[Taken] = taken) -> None:
            wanted = list(dict.fromkeys(piece.key for piece in pieces))
            got = ahead.take(TENANT, wanted)
            if got is None or len(got.keys) != len(wanted):
                raise RuntimeError("the load did not find its hint's pinning")
            taken.append(got)

        paths[name], setups[name] = take, setup
    return setups


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
