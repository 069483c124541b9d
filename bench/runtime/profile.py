"""Where one request's time to first token goes, through the runtime service (issue 29).

One request at a time, round-robin over the cells, each split into:

* ``http_stream``: the client's TTFT minus the runtime's (request and response bodies, the HTTP
  exchange, the NDJSON stream's first line reaching the client);
* ``scheduler_hooks`` and ``worker_hooks``: the connector's own hooks (CPU time on the engine's
  threads, ``connector/timing.py``): the worker half's read through ``POST /v1/trace`` after
  each request, the scheduler half's from the engine core's totals on the request's ``done``
  event (the difference from the previous request's: they are cumulative);
* ``engine_rest``: the runtime's TTFT minus the hooks: the runtime's request handling, the fair
  gate, vLLM's scheduling, the forward and the output's way back.

Cells: ``prompt`` and ``kv`` at k=0 (a kv request without facts runs as prompt mode), and at k:
``kv``, ``kv`` without its prefetch hint (``kv_no_hint``: the hint goes out with the request,
and the worker's hint thread shares the engine core's GIL with the hooks), ``kv`` with its hint
5 ms ahead (``kv_hint_ahead``: as the API sends it, at retrieval, before composing and the hop;
the worker pins the facts and the preamble then, ``connector/ahead.py``; timed from the
request), the same with a hint naming the facts alone (``kv_facts_hint_ahead``: as the API sent
it up to b603c7a; the load pins the preamble and joins the two pinnings), ``kv`` with
its facts on the pinned host tier and its hint ``HOST_LEAD_S`` ahead (``kv_host_hint_ahead``:
the copy to the GPU tier long done by the request, so what it still costs over ``kv`` is not the
copy: the facts are moved outside the timed region),
free KV (``prompt_prefix_cache``: vLLM reusing the same facts' blocks, the floor of any
injection) and ``prompt``. The runtime must run with ``INFERSCALE_TRACE_CONNECTOR=1`` (a runtime
this bench starts does); without it the hook columns would be zero, so the bench refuses.
GPU work the hooks enqueue is not waited for: on CUDA the kernel's time shows in ``engine_rest``.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from bench.runtime.measure import demoted, request_for, summary, timed
from bench.runtime.workload import Workload
from gpu_runtime.client import protocol as p
from gpu_runtime.connector.timing import (
    CLAIM_SECTIONS,
    CPU_SUFFIX,
    LOAD_SECTIONS,
    SCHEDULER_HOOKS,
    WORKER_HOOKS,
)

NO_HINT = "kv_no_hint"  # a kv request sent without its prefetch hint
HINT_AHEAD = "kv_hint_ahead"  # its hint sent HINT_LEAD_S before it, as the API's retrieval does
HINT_LEAD_S = 0.005  # the API sends the hint before composing and the hop (~5 ms, run 8)
FACTS_AHEAD = "kv_facts_hint_ahead"  # HINT_AHEAD with a hint that leaves out the preamble
HOST_AHEAD = "kv_host_hint_ahead"  # its facts on the host tier, its hint HOST_LEAD_S ahead
HOST_LEAD_S = 0.02  # k=50's 131 MB cross PCIe in ~3.5 ms (docs/benchmarks.md)
LEADS = {HINT_AHEAD: HINT_LEAD_S, FACTS_AHEAD: HINT_LEAD_S, HOST_AHEAD: HOST_LEAD_S}
PARTS = ("client_ttft", "engine_ttft", "http_stream", "scheduler_hooks", "worker_hooks",
         "engine_rest")  # fmt: skip


def cells(k: int) -> list[tuple[str, int]]:
    return [("prompt", 0), ("kv", 0), ("kv", k), (NO_HINT, k), (HINT_AHEAD, k), (FACTS_AHEAD, k),
            (HOST_AHEAD, k), ("prompt_prefix_cache", k), ("prompt", k)]  # fmt: skip


def worker_hook_ms(trace: p.TraceResult) -> dict[str, float]:
    """Total ms per worker-half hook since the last reset, summed over the worker processes."""
    out: dict[str, float] = {}
    for worker in trace.workers:
        for name, row in worker.get("hooks", {}).items():
            if name in WORKER_HOOKS or name in LOAD_SECTIONS:
                out[name] = out.get(name, 0.0) + float(row["total_ms"])
                cpu = name + CPU_SUFFIX
                out[cpu] = out.get(cpu, 0.0) + float(row.get("cpu_ms", 0.0))
    return out


def scheduler_hook_ms(now: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """One request's scheduler-half hooks (ms): the engine core's cumulative totals at its end
    less those at the previous request's end (sequential requests: nothing else ran between)."""
    names = [*SCHEDULER_HOOKS, *CLAIM_SECTIONS]
    names += [name + CPU_SUFFIX for name in names]
    return {name: now[name] - before.get(name, 0.0) for name in names if name in now}


def split(client_ttft: float, engine_ttft: float, hooks: dict[str, float]) -> dict[str, float]:
    """One request's parts (ms); they add up to ``client_ttft``."""
    scheduler = sum(hooks.get(h, 0.0) for h in SCHEDULER_HOOKS)
    worker = sum(hooks.get(h, 0.0) for h in WORKER_HOOKS)
    return {
        "client_ttft": client_ttft,
        "engine_ttft": engine_ttft,
        "http_stream": client_ttft - engine_ttft,
        "scheduler_hooks": scheduler,
        "worker_hooks": worker,
        "engine_rest": engine_ttft - scheduler - worker,
        **{f"hook:{name}": ms for name, ms in hooks.items()},
    }


class _Profiler:
    def __init__(self, w: Workload) -> None:
        self.w = w
        self.scheduler_totals: dict[str, float] = {}  # the engine core's, after the last request

    async def one(self, mode: str, k: int) -> dict[str, float]:
        w = self.w
        kv = mode == NO_HINT or mode in LEADS
        request, hint = request_for(w, "kv" if kv else mode, list(range(k)), 1)
        hint = None if mode == NO_HINT else hint
        if mode == FACTS_AHEAD and hint is not None:  # the preamble's key comes first
            hint = p.KeysRequest(tenant=hint.tenant, keys=hint.keys[1:])
        if mode == HOST_AHEAD and hint is not None:  # every fact and the preamble to the host
            await demoted(w, hint)
        await asyncio.to_thread(w.client.trace, True)  # a fresh count of the worker's hooks
        lead = LEADS.get(mode)
        if lead is not None and hint is not None:  # the clock starts at the request
            await w.client.aprefetch(hint)
            await asyncio.sleep(lead)
            hint = None
        sample = await timed(w, request, hint, time.perf_counter())
        if sample.scheduler_trace_ms is None or sample.engine_ttft_ms is None:
            raise SystemExit("profile needs a runtime started with INFERSCALE_TRACE_CONNECTOR=1")
        worker = worker_hook_ms(await asyncio.to_thread(w.client.trace, False))
        scheduler = scheduler_hook_ms(sample.scheduler_trace_ms, self.scheduler_totals)
        self.scheduler_totals = sample.scheduler_trace_ms
        return split(sample.ttft_ms, sample.engine_ttft_ms, {**scheduler, **worker})


async def profile(w: Workload, k: int, repeats: int, warmup: int = 2) -> dict[str, Any]:
    trace = await asyncio.to_thread(w.client.trace, True)
    if not trace.workers or not all(worker.get("enabled") for worker in trace.workers):
        raise SystemExit("profile needs a runtime started with INFERSCALE_TRACE_CONNECTOR=1")
    wanted = cells(k)
    samples: dict[tuple[str, int], list[dict[str, float]]] = {cell: [] for cell in wanted}
    profiler = _Profiler(w)
    await profiler.one("prompt", 0)  # the engine core's totals so far: the first baseline
    for i in range(warmup + repeats):
        for mode, n in wanted:
            sample = await profiler.one(mode, n)
            if i >= warmup:
                samples[(mode, n)].append(sample)
    rows = []
    for mode, n in wanted:
        got = samples[(mode, n)]
        names = sorted({name for s in got for name in s})
        row: dict[str, Any] = {"mode": mode, "k": n}
        row["parts_ms"] = {name: summary([s.get(name, 0.0) for s in got]) for name in names}
        rows.append(row)
        medians = {part: row["parts_ms"][part]["median"] for part in PARTS}
        print(f"profile {mode:<20} k={n:<3} " + " ".join(f"{a} {v:.2f}" for a, v in
                                                         medians.items()), flush=True)  # fmt: skip
    return {"k": k, "repeats": repeats, "rows": rows, "deltas_ms": deltas(rows, k)}


def deltas(rows: list[dict[str, Any]], k: int) -> dict[str, float]:
    """The issue's two differences, from the medians of the parts."""

    def median(mode: str, n: int, part: str = "client_ttft") -> float:
        for row in rows:
            if row["mode"] == mode and row["k"] == n:
                return float(row["parts_ms"][part]["median"])
        return math.nan

    return {
        "kv0_minus_prompt0": median("kv", 0) - median("prompt", 0),
        f"kv{k}_minus_free_kv{k}": median("kv", k) - median("prompt_prefix_cache", k),
        f"kv{k}_without_hint_minus_free_kv{k}": median(NO_HINT, k)
        - median("prompt_prefix_cache", k),
        f"kv{k}_hint_ahead_minus_free_kv{k}": median(HINT_AHEAD, k)
        - median("prompt_prefix_cache", k),
        f"kv{k}_facts_hint_ahead_minus_free_kv{k}": median(FACTS_AHEAD, k)
        - median("prompt_prefix_cache", k),
        f"kv{k}_host_hint_ahead_minus_kv{k}": median(HOST_AHEAD, k) - median("kv", k),
        f"engine_kv{k}_minus_free_kv{k}": median("kv", k, "engine_ttft")
        - median("prompt_prefix_cache", k, "engine_ttft"),
    }


def profile_table(result: dict[str, Any]) -> str:
    """Markdown: one row per cell, medians of each part in ms."""
    head = "| cell | k | " + " | ".join(PARTS) + " |"
    lines = [head, "|" + "---|" * (len(PARTS) + 2)]
    for row in result["rows"]:
        cell = "free KV" if row["mode"] == "prompt_prefix_cache" else row["mode"]
        values = " | ".join(f"{row['parts_ms'][part]['median']:.2f}" for part in PARTS)
        lines.append(f"| {cell} | {row['k']} | {values} |")
    lines.append("")
    lines += [f"* {name}: {value:+.2f} ms" for name, value in result["deltas_ms"].items()]
    return "\n".join(lines) + "\n"
