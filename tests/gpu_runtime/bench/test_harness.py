"""A tiny run of each benchmark so the harness cannot rot (no speed is asserted here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from backend.core.paths import locomo_dir
from gpu_runtime.bench.encode import encode_rate
from gpu_runtime.bench.measure import offload, throughput, ttft_vs_k
from gpu_runtime.bench.report import write_report
from gpu_runtime.bench.workload import Workload, locomo_facts, locomo_windows

pytestmark = pytest.mark.engine


def test_ttft_and_throughput_harness(runtime: Any, tmp_path: Path) -> None:
    tokenizer = runtime.llm.get_tokenizer()
    workload = Workload.build(
        runtime.llm,
        locomo_facts(locomo_dir(), 12),
        lambda text: tokenizer.encode(text, add_special_tokens=False),
        loop=runtime.loop,
        store=runtime.store,
    )
    workload.encode_all(batch=8)
    assert runtime.store.contains_all(workload.tenant, [*workload.keys, workload.preamble_key])

    ttft = ttft_vs_k(workload, [0, 4], repeats=2, warmup=1)
    assert {(r["k"], r["mode"]) for r in ttft} == {
        (k, m) for k in (0, 4) for m in ("kv", "prompt", "prompt_prefix_cache")
    }
    kv4 = next(r for r in ttft if r["k"] == 4 and r["mode"] == "kv")
    prompt4 = next(r for r in ttft if r["k"] == 4 and r["mode"] == "prompt")
    assert kv4["cached_tokens"] > 0 and prompt4["cached_tokens"] == 0  # kv really injected
    assert all(r["ttft_ms"]["median"] > 0 and r["ttft_ms"]["n"] == 2 for r in ttft)

    rows = throughput(workload, [2], k=4, max_tokens=3)
    assert {r["mode"] for r in rows} == {"kv", "prompt"}
    assert all(r["requests_per_s"] > 0 for r in rows)
    for r in rows:  # every first token comes before the round's last token
        round_ms = 1000 * r["users"] / r["requests_per_s"]
        assert 0 < r["ttft_ms"]["median"] <= r["ttft_ms"]["p95"] <= round_ms

    moved = offload(workload, runtime.store, k=4, repeats=1, warmup=0)
    assert moved["gpu"]["n"] == moved["host"]["n"] == moved["host_prefetch"]["n"] == 1
    assert "penalty_ms" in moved and "prefetch_penalty_ms" in moved

    encode = tokenizer.encode
    samples = {
        window: [
            ([t for turn in turns for t in encode(turn, add_special_tokens=False)],
             encode(fact, add_special_tokens=False))
            for turns, fact in locomo_windows(locomo_dir(), 3, window)
        ]
        for window in (0, 2)
    }  # fmt: skip
    assert all(len(ctx) == 0 for ctx, _ in samples[0]) and any(len(c) for c, _ in samples[2])
    rates = encode_rate(workload, samples, batch=2)
    assert [r["window"] for r in rates] == [0, 2] and all(r["facts_per_s"] > 0 for r in rates)
    assert rates[1]["prefill_tokens_per_fact"] > rates[0]["prefill_tokens_per_fact"]

    result = {
        "model": "smollm2", "load_format": "auto", "device": "cpu", "vllm": "0.32.0",
        "facts_encoded": len(workload.facts), "encode_s": 0.0, "mean_fact_tokens": 1.0,
        "ttft": ttft, "throughput": rows, "offload": moved, "encode": rates,
    }  # fmt: skip
    write_report(result, tmp_path)
    table = (tmp_path / "bench.md").read_text()
    assert "| 4 |" in table and "Throughput" in table and "offload" in table
    assert "prefix cache / its k=0" in table and "| 1.00x |" in table  # k=0 against itself
    assert "encoding rate" in table
    json.dumps(result)  # serialisable as written by the CLI
