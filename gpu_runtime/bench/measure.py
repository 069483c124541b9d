"""TTFT vs k and throughput vs concurrent users, kv vs prompt, measured side by side."""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from gpu_runtime.bench.workload import Workload
from gpu_runtime.connector.wire import encode_params
from gpu_runtime.types import FactKey, cache_salt

MODES = ("kv", "prompt", "prompt_prefix_cache")


Request = tuple[Any, Any, list[FactKey]]  # (prompt, kv_transfer_params, keys to prefetch)


def bench_request(w: Workload, mode: str, fact_ids: list[int], salt_tag: str) -> Request:
    from vllm.inputs import TokensPrompt

    ids, spans = w.prompt(fact_ids, w.query())
    params = encode_params(w.tenant, w.config, inject=spans) if mode == "kv" and fact_ids else None
    if mode == "prompt_prefix_cache":
        salt = cache_salt(w.tenant, f"prefix-{salt_tag}")  # shared: facts reused across requests
    else:
        salt = cache_salt(w.tenant, uuid.uuid4().hex)  # fresh: nothing reused
    keys = [span.key for span in spans] if params else []
    return TokensPrompt(prompt_token_ids=ids, cache_salt=salt), params, keys


def _ttft(
    w: Workload,
    prompt: Any,
    params: Any,
    max_tokens: int = 1,
    prefetch: list[FactKey] | None = None,
) -> tuple[float, float, int]:
    """As the runtime serves a kv request: the facts' prefetch starts the clock."""
    started = time.perf_counter()
    if prefetch and w.store is not None:
        w.store.prefetch(w.tenant, prefetch)
    first, cached = None, 0
    for output in w.loop.stream(prompt, w.sampling(max_tokens, params)):
        if first is None:
            first = time.perf_counter() - started
        cached = int(output.num_cached_tokens or 0)
    total = time.perf_counter() - started
    assert first is not None
    return first * 1000, total * 1000, cached


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"median": statistics.median(ordered), "p95": p95, "n": len(ordered)}


def ttft_vs_k(w: Workload, ks: list[int], repeats: int, warmup: int = 2) -> list[dict[str, Any]]:
    """Round-robin over (k, mode) in every repeat, so clock or cache drift hits all alike."""
    cells = [(k, mode) for k in ks for mode in MODES]
    samples: dict[tuple[int, str], list[float]] = {cell: [] for cell in cells}
    cached: dict[tuple[int, str], int] = {}
    for i in range(warmup + repeats):
        for k, mode in cells:
            prompt, params, keys = bench_request(w, mode, list(range(k)), f"k{k}")
            ttft, _, cached[(k, mode)] = _ttft(w, prompt, params, prefetch=keys)
            if i >= warmup:
                samples[(k, mode)].append(ttft)
    rows = []
    for k, mode in cells:
        stats = summary(samples[(k, mode)])
        rows.append(
            {"k": k, "mode": mode, "prompt_tokens": len(w.prompt(list(range(k)), w.query())[0]),
             "cached_tokens": cached[(k, mode)], "ttft_ms": stats}
        )  # fmt: skip
        print(f"ttft k={k:<3} {mode:<20} median {stats['median']:.2f} ms", flush=True)
    return rows


def concurrently(
    w: Workload, requests: list[Request], max_tokens: int
) -> tuple[float, list[float]]:
    """All requests at once, as many independent clients would send them: each one's facts
    are prefetched (as the runtime does) and all are submitted before any completes. Returns
    the seconds until the last finished and each request's TTFT in ms, stamped by the engine
    thread when it emitted the first token (client threads in the engine's own process would
    compete with it for the interpreter and measure themselves, not the server)."""
    started = time.perf_counter()
    for _, _, keys in requests:
        if keys and w.store is not None:
            w.store.prefetch(w.tenant, keys)
    stamps = w.loop.run_timed(
        [prompt for prompt, _, _ in requests],
        [w.sampling(max_tokens, params) for _, params, _ in requests],
    )
    elapsed = max(last for _, last in stamps) - started
    return elapsed, [(first - started) * 1000 for first, _ in stamps]


def throughput(
    w: Workload, users: list[int], k: int, max_tokens: int, rounds: int = 1
) -> list[dict[str, Any]]:
    """``n`` users at once, each asking with its own k facts; all requests submitted together."""
    rows = []
    pool = len(w.facts)
    for n in users:
        for mode in ("kv", "prompt"):
            ttfts: list[float] = []
            elapsed = 0.0
            for _ in range(rounds):
                requests = []
                for u in range(n):
                    fact_ids = sorted({(u * 7 + j) % pool for j in range(k)})
                    requests.append(bench_request(w, mode, fact_ids, f"u{u}"))
                seconds, round_ttfts = concurrently(w, requests, max_tokens)
                elapsed += seconds
                ttfts += round_ttfts
            rows.append(
                {"users": n, "mode": mode, "k": k, "max_tokens": max_tokens, "rounds": rounds,
                 "requests_per_s": n * rounds / elapsed, "ttft_ms": summary(ttfts)}
            )  # fmt: skip
            print(
                f"throughput users={n:<3} {mode:<6} {rows[-1]['requests_per_s']:.2f} req/s",
                flush=True,
            )
    return rows


OFFLOAD_CELLS = ("gpu", "host", "host_prefetch")


def offload(w: Workload, pool: Any, k: int, repeats: int, warmup: int = 2) -> dict[str, Any]:
    """kv TTFT at ``k`` with the facts on the GPU tier, on the pinned host tier read layer by
    layer during the forward (``host``), and on the host tier with the runtime's prefetch at
    submission (``host_prefetch``), alternating request by request in one run. Facts are moved
    between requests, outside the timed region."""
    from gpu_runtime.pool.index import Tier

    fact_ids = list(range(k))
    keys = [w.keys[i] for i in fact_ids] + [w.preamble_key]
    samples: dict[str, list[float]] = {cell: [] for cell in OFFLOAD_CELLS}
    resident = dict.fromkeys(OFFLOAD_CELLS, len(keys))  # fewest facts seen on the tier measured
    for i in range(warmup + repeats):
        for cell in OFFLOAD_CELLS:
            tier = "gpu" if cell == "gpu" else "host"
            if tier == "host":
                pool.demote(w.tenant, keys, Tier.HOST)
            else:
                for key in keys:
                    pool.get(w.tenant, key)  # a read promotes towards the GPU tier
            placed = pool.index.placements(w.tenant, keys)
            on_tier = sum(1 for p in placed if p is not None and p[0].value == tier)
            prompt, params, _ = bench_request(w, "kv", fact_ids, "offload")
            ttft, _, _ = _ttft(w, prompt, params, prefetch=keys if cell != "host" else None)
            if i >= warmup:
                samples[cell].append(ttft)
                resident[cell] = min(resident[cell], on_tier)
    result: dict[str, Any] = {"k": k, **{cell: summary(v) for cell, v in samples.items()}}
    result["segments"] = len(keys)
    result["resident"] = resident  # < segments: the tier was too small for all of them
    for cell in OFFLOAD_CELLS:
        median = result[cell]["median"]
        print(f"offload k={k} {cell:<13} ({resident[cell]}/{len(keys)}) {median:.2f} ms")
    result["penalty_ms"] = result["host"]["median"] - result["gpu"]["median"]
    result["prefetch_penalty_ms"] = result["host_prefetch"]["median"] - result["gpu"]["median"]
    return result
