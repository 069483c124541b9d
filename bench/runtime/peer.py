"""``peer``: our runtime service against vLLM's own OpenAI server (``vllm serve``, same model
shape, same GPU), both over HTTP from this client, in one run.

* TTFT at each k, round-robin: our ``prompt`` and ``kv`` modes and the peer fed the very same
  token ids (``/v1/completions``, a fresh ``cache_salt`` per request so that, like our cells,
  nothing is reused from its prefix cache); and our ``free KV``, prompt mode with the same facts'
  blocks reused from vLLM's prefix cache: the floor kv injection is measured against, through the
  same service (k=0 shows what the connector costs a request without facts).
* Throughput at ``n`` concurrent streaming users, each with its own k facts: our ``kv`` mode
  against the peer fed the same facts as text (its prefix cache on, as deployed, under a salt of
  this run's, so that nothing is reused from an earlier run against the same server).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from bench.runtime.measure import concurrently, one, request_for, summary
from bench.runtime.workload import Workload

SIDES = ("runtime_prompt", "runtime_kv", "runtime_free_kv", "vllm_server")


async def _peer_model(http: aiohttp.ClientSession, url: str, timeout_s: float = 900.0) -> str:
    """The peer's served model, once it answers (a peer started beside us may still load)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            async with http.get(f"{url}/v1/models") as response:
                listed = await response.json()
            return str(listed["data"][0]["id"])
        except (aiohttp.ClientError, KeyError, IndexError, ValueError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(2)


async def _peer_request(
    http: aiohttp.ClientSession, url: str, model: str, ids: list[int], max_tokens: int,
    salt: str, started: float,
) -> tuple[float, float]:  # fmt: skip
    """(TTFT ms, total ms) of one streamed completion, both from ``started``; ``salt``: the
    prefix-cache namespace the request may reuse blocks from (vLLM's ``cache_salt``)."""
    body: dict[str, Any] = {
        "model": model, "prompt": ids, "max_tokens": max_tokens, "stream": True,
        "temperature": 0, "ignore_eos": True,
    }  # fmt: skip
    body["cache_salt"] = salt
    first: float | None = None
    async with http.post(f"{url}/v1/completions", json=body) as response:
        response.raise_for_status()
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if first is None and chunk.get("choices"):  # streamed once the first token is out
                first = time.perf_counter()
    done = time.perf_counter()
    first = first or done
    return (first - started) * 1000, (done - started) * 1000


async def peer(
    w: Workload, url: str, ks: list[int], repeats: int, users: list[int], k: int,
    max_tokens: int, rounds: int = 1, warmup: int = 2,
) -> dict[str, Any]:  # fmt: skip
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
        model = await _peer_model(http, url)
        samples: dict[tuple[int, str], list[float]] = {(x, s): [] for x in ks for s in SIDES}
        for i in range(warmup + repeats):
            for x in ks:
                facts = list(range(x))
                ids, _ = w.prompt(facts, w.query())
                got = {
                    "runtime_prompt": (await one(w, "prompt", facts)).ttft_ms,
                    "runtime_kv": (await one(w, "kv", facts)).ttft_ms,
                    "runtime_free_kv": (await one(w, "prompt_prefix_cache", facts)).ttft_ms,
                    "vllm_server": (await _peer_request(
                        http, url, model, ids, 1, uuid.uuid4().hex, time.perf_counter()))[0],
                }  # fmt: skip
                if i >= warmup:
                    for side, value in got.items():
                        samples[(x, side)].append(value)
        ttft: list[dict[str, Any]] = [
            {"k": x, "side": side, "ttft_ms": summary(samples[(x, side)])}
            for x in ks for side in SIDES
        ]  # fmt: skip
        for row in ttft:
            print(f"peer ttft k={row['k']:<3} {row['side']:<15} {row['ttft_ms']['median']:.2f} ms")
        rows = [await _throughput(w, http, url, model, n, k, max_tokens, rounds) for n in users]
    return {"peer_model": model, "ttft": ttft, "throughput": rows}


# The throughput cells of one user count. ``kv`` and ``vllm_server`` are the comparison: each
# user's facts in the order one question's retrieval ranks them, a new order for every question
# (a tenant's users ask new questions over their own facts), so neither server meets a prompt
# it has seen; both prefix caches are on, as deployed. The ceilings bound any memory system on
# this engine: a request with no facts at all decodes over a shorter context than one with k
# facts, so its rate bounds every way of serving k facts, and free KV (the same prompts with
# their facts' blocks already in vLLM's prefix cache) is what injection would reach if it cost
# nothing. Free KV over 100 users' own facts is no ceiling when their blocks do not all fit the
# prefix cache (it prefills what was evicted), so ``free_kv_shared`` gives every user the same
# facts, in the cache once: each request still decodes over its k facts (what any memory
# system's requests do, and at 100 users what the decode steps' reads of the cache cost), with
# no prefill of them at all. A goal above the ceiling's ratio is out of reach. The ``repeated``
# cells are this bench before the orders (runs 9-19): every user's facts sorted, and the same
# prompts in every round, so the peer's prefix cache met users' shared prefixes and each prompt
# again.
THROUGHPUT_SIDES = (
    "runtime_kv", "vllm_server", "runtime_no_facts", "vllm_server_no_facts", "runtime_free_kv",
    "runtime_free_kv_shared", "runtime_kv_repeated", "vllm_server_repeated",
)  # fmt: skip
CEILINGS = ("runtime_no_facts", "vllm_server_no_facts", "runtime_free_kv", "runtime_free_kv_shared")
REPEATED = ("runtime_kv_repeated", "vllm_server_repeated")


async def _prefix_cache_tokens(http: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    """The peer's prefix-cache (queried, hit) prompt tokens so far, from its /metrics."""
    queried = hit = 0.0
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith("vllm:prefix_cache_queries_total"):
            queried += float(value)
        elif name.startswith("vllm:prefix_cache_hits_total"):
            hit += float(value)
    return queried, hit


async def _throughput(
    w: Workload, http: aiohttp.ClientSession, url: str, model: str, n: int, k: int,
    max_tokens: int, rounds: int,
) -> dict[str, Any]:  # fmt: skip
    pool = len(w.facts)
    facts = [sorted({(u * 7 + j) % pool for j in range(k)}) for u in range(n)]
    rng = random.Random(k * 1000 + n)

    def ranked() -> list[list[int]]:
        """Each user's facts as one new question's retrieval orders them."""
        return [rng.sample(ids, len(ids)) for ids in facts]

    def ours(mode: str, fact_ids: list[list[int]]) -> list[Any]:
        requests = [request_for(w, mode, ids, max_tokens) for ids in fact_ids]
        for request, _ in requests:
            request.sampling.prefix_cache = True  # as deployed
        return requests

    async def server(prompts: list[list[int]], salt: str) -> tuple[float, list[float]]:
        started = time.perf_counter()
        done = await asyncio.gather(
            *(_peer_request(http, url, model, ids, max_tokens, salt, started) for ids in prompts)
        )  # fmt: skip
        return max(total for _, total in done) / 1000, [first for first, _ in done]

    def asked(orders: list[list[int]]) -> list[list[int]]:
        return [w.prompt(ids, w.query())[0] for ids in orders]

    # The peer's prefix cache on, as deployed, but this run's own: a server that served the
    # same prompts in an earlier run would otherwise answer from that run's blocks (run 13:
    # 209 req/s against a fresh run's 65), while our runtime starts fresh in every run.
    salt = uuid.uuid4().hex
    repeated = asked(facts)
    no_facts = [w.prompt([], w.query())[0] for _ in facts]
    await concurrently(w, ours("prompt_prefix_cache", facts))  # free KV's blocks, untimed
    shared = [facts[0]] * n
    cells: dict[str, Callable[[], Awaitable[tuple[float, list[float]]]]] = {
        "runtime_kv": lambda: concurrently(w, ours("kv", ranked())),
        "vllm_server": lambda: server(asked(ranked()), salt),
        "runtime_no_facts": lambda: concurrently(w, ours("prompt", [[] for _ in facts])),
        "vllm_server_no_facts": lambda: server(no_facts, salt),
        "runtime_free_kv": lambda: concurrently(w, ours("prompt_prefix_cache", facts)),
        # (its first request of a round prefills the facts again if free KV evicted them)
        "runtime_free_kv_shared": lambda: concurrently(w, ours("prompt_prefix_cache", shared)),
        "runtime_kv_repeated": lambda: concurrently(w, ours("kv", facts)),
        "vllm_server_repeated": lambda: server(repeated, salt),
    }
    elapsed = dict.fromkeys(THROUGHPUT_SIDES, 0.0)
    ttfts: dict[str, list[float]] = {side: [] for side in THROUGHPUT_SIDES}
    cache = {side: [0.0, 0.0] for side in THROUGHPUT_SIDES if side.startswith("vllm")}
    for _ in range(rounds):  # every side once a round, so drift over the run is shared
        for side in THROUGHPUT_SIDES:
            before = await _prefix_cache_tokens(http, url) if side in cache else (0.0, 0.0)
            seconds, firsts = await cells[side]()
            if side in cache:
                after = await _prefix_cache_tokens(http, url)
                cache[side][0] += after[0] - before[0]
                cache[side][1] += after[1] - before[1]
            elapsed[side] += seconds
            ttfts[side] += firsts
    rate = {side: n * rounds / elapsed[side] for side in THROUGHPUT_SIDES}
    peer_rate = rate["vllm_server"]

    def cell_of(side: str, against: float) -> dict[str, Any]:
        row = {"requests_per_s": rate[side], "over_peer": rate[side] / against,
               "ttft_ms": summary(ttfts[side])}  # fmt: skip
        if side in cache:  # the share of its prompt tokens the peer found in its prefix cache
            queried, hit = cache[side]
            row["peer_prefix_cache_hit_rate"] = hit / queried if queried else None
        return row

    cell: dict[str, Any] = {
        "users": n, "k": k, "max_tokens": max_tokens, "rounds": rounds,
        "runtime_kv_requests_per_s": rate["runtime_kv"], "vllm_server_requests_per_s": peer_rate,
        "ratio": rate["runtime_kv"] / peer_rate,
        "runtime_kv_ttft_ms": summary(ttfts["runtime_kv"]),
        "vllm_server_ttft_ms": summary(ttfts["vllm_server"]),
        "vllm_server_prefix_cache_hit_rate": cell_of("vllm_server", peer_rate)[
            "peer_prefix_cache_hit_rate"
        ],
        "ceilings": {side: cell_of(side, peer_rate) for side in CEILINGS},
        "repeated": {side: cell_of(side, rate["vllm_server_repeated"]) for side in REPEATED},
    }  # fmt: skip
    print(f"peer throughput users={n:<3} kv/vllm {cell['ratio']:.2f}x", flush=True)
    for side, c in cell["ceilings"].items():
        print(f"peer ceiling users={n:<3} {side:<21} {c['over_peer']:.2f}x", flush=True)
    kv_again = cell["repeated"]["runtime_kv_repeated"]["over_peer"]
    print(f"peer repeated users={n:<3} kv/vllm {kv_again:.2f}x", flush=True)
    return cell


def peer_table(result: dict[str, Any]) -> str:
    data = result.get("peer")
    if not data:
        return ""
    by = {(r["k"], r["side"]): r["ttft_ms"]["median"] for r in data["ttft"]}
    lines = [
        "| k | runtime prompt ms | vLLM server ms | prompt - server ms | runtime kv ms "
        "| free KV ms | kv - free KV ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in sorted({r["k"] for r in data["ttft"]}):
        ours, theirs, kv = by[(k, "runtime_prompt")], by[(k, "vllm_server")], by[(k, "runtime_kv")]
        free = by.get((k, "runtime_free_kv"))  # (absent from runs before it was measured)
        cells = f"{free:.2f} | {kv - free:+.2f}" if free is not None else "- | -"
        lines.append(
            f"| {k} | {ours:.2f} | {theirs:.2f} | {ours - theirs:+.2f} | {kv:.2f} | {cells} |"
        )
    lines += [
        "",
        "| users | k | runtime kv req/s | vLLM server req/s (facts as text) | ratio "
        "| the peer's prefix-cache hits |",
        "|---|---|---|---|---|---|",
    ]
    for r in data["throughput"]:
        hits = r.get("vllm_server_prefix_cache_hit_rate")  # (runs since the question orders)
        lines.append(
            f"| {r['users']} | {r['k']} | {r['runtime_kv_requests_per_s']:.1f} | "
            f"{r['vllm_server_requests_per_s']:.1f} | {r['ratio']:.2f}x | {_share(hits)} |"
        )
    ceilings = [r for r in data["throughput"] if r.get("ceilings")]  # (runs since 2026-12-06)
    if ceilings:
        lines += [
            "",
            "Ceilings (the same users, one run): any memory system's rate is at most the rate "
            "with no facts; injection's, at most free KV's.",
            "",
            "| users | cell | req/s | over the peer at k | TTFT p50 ms "
            "| the peer's prefix-cache hits |",
            "|---|---|---|---|---|---|",
        ]
        for r in ceilings:
            shown: dict[str, dict[str, Any]] = {**r["ceilings"], **r.get("repeated", {})}
            for side, c in shown.items():
                lines.append(
                    f"| {r['users']} | {side} | {c['requests_per_s']:.1f} | "
                    f"{c['over_peer']:.2f}x | {c['ttft_ms']['median']:.1f} | "
                    f"{_share(c.get('peer_prefix_cache_hit_rate'))} |"
                )
        if any(r.get("repeated") for r in ceilings):
            lines += ["", "(The repeated cells' ratio is to vllm_server_repeated.)"]
    return "\n".join(lines)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"
