"""TTFT vs k, throughput vs concurrent users and the offload cells, kv vs prompt, side by side,
as clients of the runtime's HTTP API see them (every request streamed, TTFT at its first token).

Cells: ``kv`` injects the facts' KV (the client's prefetch hint first, as the backend sends it);
``prompt`` prefills them (Mem0-style); ``prompt_prefix_cache`` is free KV, vLLM's own prefix
cache reusing the same facts' blocks. ``kv`` and ``prompt`` read nothing from vLLM's prefix cache
(``prefix_cache=False``), so each measures its own work.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

from bench.runtime.workload import Workload
from gpu_runtime.client import protocol as p
from gpu_runtime.types import MemorySegment

MODES = ("kv", "prompt", "prompt_prefix_cache")


@dataclass(frozen=True)
class Sample:
    ttft_ms: float
    total_ms: float
    cached_tokens: int
    injected_tokens: int
    prompt_tokens: int
    engine_ttft_ms: float | None = None  # the runtime's own, from the ``done`` event
    scheduler_trace_ms: dict[str, float] | None = None  # hooks timed: the engine core's totals


def request_for(
    w: Workload, mode: str, fact_ids: list[int], max_tokens: int
) -> tuple[p.GenerateRequest, p.KeysRequest | None]:
    ids, spans = w.prompt(fact_ids, w.query())
    kv = mode == "kv"
    segment = p.segment_model(MemorySegment(w.tenant, w.config, spans)) if kv else None
    sampling = p.SamplingModel(
        max_tokens=max_tokens, ignore_eos=True, prefix_cache=mode == "prompt_prefix_cache"
    )
    request = p.GenerateRequest(
        tenant=w.tenant.value, token_ids=ids, mode="kv" if kv else "prompt",
        segment=segment, sampling=sampling,
    )  # fmt: skip
    # As the API: a hint only when facts are injected (the preamble alone runs as prompt mode,
    # and a hint naming it would only pin it for nothing, beside the request).
    hint = w.keys_request([s.key for s in spans]) if kv and len(spans) > 1 else None
    return request, hint


async def timed(
    w: Workload, request: p.GenerateRequest, hint: p.KeysRequest | None, started: float
) -> Sample:
    """One streamed request; the clock starts at ``started``. A hint goes out first, as the
    backend sends it, without waiting for its answer (it overlaps the request's own sending,
    as in the backend it overlaps composing)."""
    sent = asyncio.ensure_future(w.client.aprefetch(hint)) if hint is not None else None
    first: float | None = None
    end: p.GenerateEvent | None = None
    async for event in w.client.agenerate(request):
        if first is None and event.token_ids:
            first = time.perf_counter()
        if event.event == "done":
            end = event
    done = time.perf_counter()
    if sent is not None:
        await sent
    assert first is not None and end is not None and end.usage is not None
    usage = end.usage
    return Sample(
        (first - started) * 1000, (done - started) * 1000, usage.cached_tokens,
        usage.injected_tokens, usage.prompt_tokens, end.engine_ttft_ms, end.scheduler_trace_ms,
    )  # fmt: skip


async def one(w: Workload, mode: str, fact_ids: list[int], max_tokens: int = 1) -> Sample:
    request, hint = request_for(w, mode, fact_ids, max_tokens)
    return await timed(w, request, hint, time.perf_counter())


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"median": statistics.median(ordered), "p95": p95, "n": len(ordered)}


async def ttft_vs_k(
    w: Workload, ks: list[int], repeats: int, warmup: int = 2
) -> list[dict[str, Any]]:
    """Round-robin over (k, mode) in every repeat, so clock or cache drift hits all alike."""
    cells = [(k, mode) for k in ks for mode in MODES]
    samples: dict[tuple[int, str], list[Sample]] = {cell: [] for cell in cells}
    for i in range(warmup + repeats):
        for k, mode in cells:
            sample = await one(w, mode, list(range(k)))
            if i >= warmup:
                samples[(k, mode)].append(sample)
    rows = []
    for k, mode in cells:
        got = samples[(k, mode)]
        stats = summary([s.ttft_ms for s in got])
        rows.append(
            {"k": k, "mode": mode, "prompt_tokens": got[-1].prompt_tokens,
             "cached_tokens": got[-1].cached_tokens, "injected_tokens": got[-1].injected_tokens,
             "ttft_ms": stats}
        )  # fmt: skip
        print(f"ttft k={k:<3} {mode:<20} median {stats['median']:.2f} ms", flush=True)
    return rows


async def concurrently(
    w: Workload, requests: list[tuple[p.GenerateRequest, p.KeysRequest | None]]
) -> tuple[float, list[float]]:
    """All requests at once, as many independent clients would send them; returns the seconds
    until the last finished and each request's TTFT in ms."""
    started = time.perf_counter()
    done = await asyncio.gather(*(timed(w, r, hint, started) for r, hint in requests))
    return max(s.total_ms for s in done) / 1000, [s.ttft_ms for s in done]


async def throughput(
    w: Workload, users: list[int], k: int, max_tokens: int, rounds: int = 1
) -> list[dict[str, Any]]:
    """``n`` users at once, each asking with its own k facts (vLLM's prefix cache as deployed:
    the shared preamble is reused)."""
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
                    request, hint = request_for(w, mode, fact_ids, max_tokens)
                    request.sampling.prefix_cache = True
                    requests.append((request, hint))
                seconds, round_ttfts = await concurrently(w, requests)
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


def lead_cell(lead_ms: int, tier: str = "host") -> str:
    return f"{tier}_hint_{lead_ms}ms"


async def offload(
    w: Workload, k: int, repeats: int, warmup: int = 2, hint_leads_ms: tuple[int, ...] = ()
) -> dict[str, Any]:
    """kv TTFT at ``k`` with the facts on the GPU tier, on the pinned host tier read layer by
    layer during the forward (``host``), on the host tier with the client's prefetch hint right
    before the request (``host_prefetch``), and with the hint sent ``lead`` ms ahead of the
    request (``host_hint_<lead>ms``: the time retrieval and composing leave the copy when the
    API sends the hint as soon as it knows the facts), alternating request by request. Each
    lead has its like on the GPU tier (``gpu_hint_<lead>ms``: the same hint, the same wait),
    so that a lead's penalty is the host tier's alone, not the idle engine's or the pins'.
    Facts are moved between requests, outside the timed region; TTFT counts from the request."""
    keys = [w.keys[i] for i in range(k)] + [w.preamble_key]
    wanted = w.keys_request(keys)
    leads = {lead_cell(lead, tier): lead for lead in hint_leads_ms for tier in ("host", "gpu")}
    cells = [*OFFLOAD_CELLS, *leads]
    samples: dict[str, list[float]] = {cell: [] for cell in cells}
    resident = dict.fromkeys(cells, len(keys))  # fewest facts seen on the tier measured
    for i in range(warmup + repeats):
        for cell in cells:
            tier = "gpu" if cell.startswith("gpu") else "host"
            if tier == "host":
                placed = await demoted(w, wanted)
            else:
                await w.client.aprefetch(wanted)
                placed = await settled(w, wanted, tier)
            request, hint = request_for(w, "kv", list(range(k)), 1)
            if cell in leads:
                await w.client.aprefetch(wanted)  # answered at once; the copy runs on
                await asyncio.sleep(leads[cell] / 1000)
            sample = await timed(w, request, hint if cell == "host_prefetch" else None,
                                 time.perf_counter())  # fmt: skip
            if i >= warmup:
                samples[cell].append(sample.ttft_ms)
                resident[cell] = min(resident[cell], placed)
    result: dict[str, Any] = {"k": k, **{cell: summary(v) for cell, v in samples.items()}}
    result["segments"] = len(keys)
    result["resident"] = resident  # < segments: the tier was too small for all of them
    result["hint_leads_ms"] = list(hint_leads_ms)
    for cell in cells:
        median = result[cell]["median"]
        print(f"offload k={k} {cell:<17} ({resident[cell]}/{len(keys)}) {median:.2f} ms")
    gpu = result["gpu"]["median"]
    result["penalty_ms"] = result["host"]["median"] - gpu
    result["prefetch_penalty_ms"] = result["host_prefetch"]["median"] - gpu
    result["lead_penalty_ms"] = {  # against the GPU tier's cell with the same lead
        str(lead): result[lead_cell(lead)]["median"] - result[lead_cell(lead, "gpu")]["median"]
        for lead in hint_leads_ms
    }
    result["lead_penalty_vs_gpu_ms"] = {  # against ``gpu``, as reported up to 8183a47
        str(lead): result[lead_cell(lead)]["median"] - gpu for lead in hint_leads_ms
    }
    return result


async def demoted(w: Workload, wanted: p.KeysRequest, timeout_s: float = 1.5) -> int:
    """Facts on the host tier, asked again until all are there: the runtime skips a pinned
    fact, and a prefetch hint that reached the runtime after its request's load holds its
    facts pinned on the GPU tier until it expires (1 s). Asked once, the offload cell after
    ``host_prefetch`` (whose hint goes out with its request) measured the GPU tier in runs
    21 and 28 (``resident`` 0 of 51). Asked until a held hint has surely expired; a host
    tier too small for them all keeps what fits (``resident`` says how many)."""
    demote = p.DemoteRequest(tenant=wanted.tenant, keys=wanted.keys, tier="host")
    deadline = time.monotonic() + timeout_s
    while True:
        await asyncio.to_thread(w.client.demote, demote)
        on_host = await settled(w, wanted, "host", timeout_s=0.05)
        if on_host == len(wanted.keys) or time.monotonic() > deadline:
            return on_host
        await asyncio.sleep(0.05)


async def settled(w: Workload, wanted: p.KeysRequest, tier: str, timeout_s: float = 5.0) -> int:
    """Facts on ``tier``, once the moves asked for have landed (a prefetch is asynchronous)."""
    deadline = time.monotonic() + timeout_s
    while True:
        tiers = await asyncio.to_thread(w.client.placement, wanted)
        on_tier = sum(1 for t in tiers if t == tier)
        if on_tier == len(tiers) or time.monotonic() > deadline:
            return on_tier
        await asyncio.sleep(0.01)
