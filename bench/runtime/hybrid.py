"""TTFT of hybrid injection against the number of facts recomputed, side by side with pure kv and
prompt mode at the same k: the cost side of ``memory.mode = "hybrid"`` (docs/accuracy.md has the
accuracy side).

Hybrid injects the k - r least relevant facts as stored KV and prefills the r most relevant as
text after them, so vLLM computes r facts' tokens plus the query. ``r = 0`` is pure kv and
``r = k`` prefills every fact (only the preamble is injected).
"""

from __future__ import annotations

import time
from typing import Any

from bench.runtime.measure import one, summary, timed
from bench.runtime.workload import Workload
from gpu_runtime.client import protocol as p
from gpu_runtime.types import MemorySegment


def hybrid_request(
    w: Workload, fact_ids: list[int], recompute: int, max_tokens: int = 1
) -> tuple[p.GenerateRequest, p.KeysRequest]:
    """The kv request of these facts with only the first ``len(fact_ids) - recompute`` (and the
    preamble) in the memory segment; the token ids are those of prompt mode."""
    ids, spans = w.prompt(fact_ids, w.query())
    injected = spans[: 1 + max(0, len(fact_ids) - recompute)]  # the preamble is spans[0]
    request = p.GenerateRequest(
        tenant=w.tenant.value, token_ids=ids, mode="kv",
        segment=p.segment_model(MemorySegment(w.tenant, w.config, injected)),
        sampling=p.SamplingModel(max_tokens=max_tokens, ignore_eos=True, prefix_cache=False),
    )  # fmt: skip
    return request, w.keys_request([s.key for s in injected])


async def ttft_vs_recompute(
    w: Workload, ks: list[int], recomputes: list[int], repeats: int, warmup: int = 2
) -> list[dict[str, Any]]:
    """Round-robin over every (k, cell) in each repeat; cells: ``prompt`` and ``r=<n>``."""
    cells = [(k, r) for k in ks for r in [*recomputes, -1] if r <= k]  # -1: prompt mode
    samples: dict[tuple[int, int], list[float]] = {cell: [] for cell in cells}
    injected: dict[tuple[int, int], int] = {}
    for i in range(warmup + repeats):
        for k, r in cells:
            facts = list(range(k))
            if r < 0:
                sample = await one(w, "prompt", facts)
            else:
                request, hint = hybrid_request(w, facts, r)
                sample = await timed(w, request, hint, time.perf_counter())
            injected[(k, r)] = sample.injected_tokens
            if i >= warmup:
                samples[(k, r)].append(sample.ttft_ms)
    rows = []
    for k, r in cells:
        stats = summary(samples[(k, r)])
        rows.append(
            {"k": k, "recompute": None if r < 0 else r, "mode": "prompt" if r < 0 else "hybrid",
             "injected_tokens": injected[(k, r)], "ttft_ms": stats}
        )  # fmt: skip
        name = "prompt" if r < 0 else f"r={r}"
        print(f"hybrid k={k:<3} {name:<8} median {stats['median']:.2f} ms", flush=True)
    return rows
