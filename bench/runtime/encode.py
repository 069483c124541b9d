"""``encode``: facts per second for context-window encoding at several window sizes w.

Each fact is prefilled after the w LoCoMo turns that precede its evidence turn, and only the
fact's own KV is captured (what the platform's encoding jobs do), in batches sent to the
runtime's encode API. The rate includes writing every fact to the pool (GPU tier and the durable
disk copy) and the HTTP round trip.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from bench.runtime.workload import Workload
from gpu_runtime.client import protocol as p
from gpu_runtime.types import EncodingConfig, FactKey, Span, TenantId


def encode_rate(
    w: Workload,
    samples: dict[int, list[tuple[list[int], list[int]]]],  # window -> [(window ids, fact ids)]
    batch: int = 64,
) -> list[dict[str, Any]]:
    rows = []
    for window, items in samples.items():
        tenant = TenantId(f"encode-w{window}-{uuid.uuid4().hex[:6]}")
        config = EncodingConfig(w.config.model, window, 1)
        jobs = []
        for i, (context, fact) in enumerate(items):
            key = FactKey.for_fact(tenant, f"f{i}", 1, config)
            span = Span(key, len(w.preamble) + len(context), len(fact))
            jobs.append((w.preamble + context + fact, span))
        started = time.perf_counter()
        for first in range(0, len(jobs), batch):
            chunk = jobs[first : first + batch]
            result = w.client.encode(
                p.EncodeRequest(
                    tenant=tenant.value,
                    window=window,
                    items=[
                        p.EncodeItemModel(token_ids=ids, capture=[p.span_model(s)])
                        for ids, s in chunk
                    ],
                )
            )
            if result.missing:
                raise RuntimeError(f"{len(result.missing)} facts were not stored")
            print(f"encode w={window:<3} {min(first + batch, len(jobs))}/{len(jobs)}", flush=True)
        elapsed = time.perf_counter() - started
        prefilled = sum(len(ids) for ids, _ in jobs)
        rows.append(
            {"window": window, "facts": len(jobs), "seconds": elapsed,
             "facts_per_s": len(jobs) / elapsed, "prefill_tokens_per_fact": prefilled / len(jobs)}
        )  # fmt: skip
        print(f"encode w={window:<3} {rows[-1]['facts_per_s']:.1f} facts/s", flush=True)
    return rows
