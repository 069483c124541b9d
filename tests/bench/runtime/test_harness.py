"""A tiny run of each benchmark against the session's runtime service, so the harness cannot rot
(no speed is asserted here)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from backend.core.paths import locomo_dir
from bench.runtime.encode import encode_rate
from bench.runtime.measure import offload, throughput, ttft_vs_k
from bench.runtime.profile import PARTS, profile
from bench.runtime.report import write_report
from bench.runtime.workload import Workload, locomo_facts, locomo_windows
from gpu_runtime.client.http import RuntimeClient
from tests.support import SERVICE_TOKEN, EngineHarness

pytestmark = pytest.mark.engine


async def _measure(workload: Workload) -> dict[str, Any]:
    try:
        return {
            "ttft": await ttft_vs_k(workload, [0, 4], repeats=2, warmup=1),
            "throughput": await throughput(workload, [2], k=4, max_tokens=3),
            "offload": await offload(workload, k=4, repeats=1, warmup=0, hint_leads_ms=(5,)),
            "profile": await profile(workload, k=4, repeats=2, warmup=1),
        }
    finally:
        await workload.client.aclose()


def test_ttft_throughput_offload_and_encode_harness(runtime: EngineHarness, tmp_path: Path) -> None:
    client = RuntimeClient(runtime.client.base_url, SERVICE_TOKEN)
    workload = Workload.build(client, locomo_facts(locomo_dir(), 12))
    workload.encode_all(batch=8)
    keys = [*workload.keys, workload.preamble_key]
    assert all(client.contains(workload.keys_request(keys)))

    measured = asyncio.run(_measure(workload))
    ttft = measured["ttft"]
    assert {(r["k"], r["mode"]) for r in ttft} == {
        (k, m) for k in (0, 4) for m in ("kv", "prompt", "prompt_prefix_cache")
    }
    kv4 = next(r for r in ttft if r["k"] == 4 and r["mode"] == "kv")
    prompt4 = next(r for r in ttft if r["k"] == 4 and r["mode"] == "prompt")
    assert kv4["injected_tokens"] > 0 and prompt4["cached_tokens"] == 0  # kv really injected
    assert all(r["ttft_ms"]["median"] > 0 and r["ttft_ms"]["n"] == 2 for r in ttft)

    rows = measured["throughput"]
    assert {r["mode"] for r in rows} == {"kv", "prompt"}
    assert all(r["requests_per_s"] > 0 for r in rows)
    for r in rows:  # every first token comes before the round's last token
        round_ms = 1000 * r["users"] / r["requests_per_s"]
        assert 0 < r["ttft_ms"]["median"] <= r["ttft_ms"]["p95"] <= round_ms

    moved = measured["offload"]
    assert moved["gpu"]["n"] == moved["host"]["n"] == moved["host_prefetch"]["n"] == 1
    # The demote really moved them: to the host tier as far as it had room. The session's tiny
    # host tier is shared with every other test's tenants, so it may take only some; the
    # bench reports how many (resident < segments).
    assert 0 < moved["resident"]["host"] <= moved["segments"]
    assert 0 < moved["resident"]["host_hint_5ms"] <= moved["segments"]  # after host_prefetch
    assert "penalty_ms" in moved and "prefetch_penalty_ms" in moved
    assert moved["host_hint_5ms"]["n"] == moved["gpu_hint_5ms"]["n"] == 1
    assert set(moved["lead_penalty_ms"]) == set(moved["lead_penalty_vs_gpu_ms"]) == {"5"}
    assert moved["lead_penalty_ms"]["5"] == pytest.approx(
        moved["host_hint_5ms"]["median"] - moved["gpu_hint_5ms"]["median"]
    )

    profiled = measured["profile"]
    rows = {(r["mode"], r["k"]): r["parts_ms"] for r in profiled["rows"]}
    assert set(rows) == {("prompt", 0), ("kv", 0), ("kv", 4), ("kv_no_hint", 4),
                         ("kv_hint_ahead", 4), ("kv_facts_hint_ahead", 4),
                         ("kv_host_hint_ahead", 4), ("prompt_prefix_cache", 4),
                         ("prompt", 4)}  # fmt: skip
    for parts in rows.values():
        assert all(parts[part]["n"] == 2 for part in PARTS)
        median = {part: parts[part]["median"] for part in PARTS}
        assert 0 < median["engine_ttft"] < median["client_ttft"]  # the HTTP hop costs something
        assert median["scheduler_hooks"] > 0  # vLLM asks the connector about every request
    # Only a request with facts loads: the worker's load hook has work in the kv k=4 cell.
    for cell in ("kv", "kv_no_hint", "kv_hint_ahead", "kv_facts_hint_ahead", "kv_host_hint_ahead"):
        kv = rows[(cell, 4)]
        assert kv["hook:start_load_kv"]["median"] > 0 and kv["worker_hooks"]["median"] > 0
    assert set(profiled["deltas_ms"]) == {
        "kv0_minus_prompt0", "kv4_minus_free_kv4", "kv4_without_hint_minus_free_kv4",
        "kv4_hint_ahead_minus_free_kv4", "kv4_facts_hint_ahead_minus_free_kv4",
        "kv4_host_hint_ahead_minus_kv4",
        "engine_kv4_minus_free_kv4",
    }  # fmt: skip

    samples = {
        window: [
            ([t for turn in turns for t in workload.ids(turn)], workload.ids(fact))
            for turns, fact in locomo_windows(locomo_dir(), 3, window)
        ]
        for window in (0, 2)
    }
    assert all(len(ctx) == 0 for ctx, _ in samples[0]) and any(len(c) for c, _ in samples[2])
    rates = encode_rate(workload, samples, batch=2)
    assert [r["window"] for r in rates] == [0, 2] and all(r["facts_per_s"] > 0 for r in rates)
    assert rates[1]["prefill_tokens_per_fact"] > rates[0]["prefill_tokens_per_fact"]

    result = {
        "model": "smollm2", "load_format": "auto", "device": "cpu", "vllm": "0.32.0",
        "facts_encoded": len(workload.facts), "encode_s": 0.0, "mean_fact_tokens": 1.0,
        **measured, "encode": rates,
    }  # fmt: skip
    write_report(result, tmp_path)
    table = (tmp_path / "bench.md").read_text()
    assert "| 4 |" in table and "Throughput" in table and "offload" in table
    assert "prefix cache / its k=0" in table and "| 1.00x |" in table  # k=0 against itself
    assert "encoding rate" in table
    assert "| 5 ms |" in table and "| free KV | 4 |" in table
    json.dumps(result)  # serialisable as written by the CLI
