"""Theorem 3 on a GPU (vLLM 0.26 CUDA, FLASH_ATTN), through the runtime service: a normal run vs
an injected run, the engine core in its own process as served.

Real architectures with dummy weights and random token ids: for each case the segment's KV is
captured from a prefill of the whole prompt (the runtime's encode API), then injected into
scrubbed blocks of a fresh request (kv mode, a cache salt of its own); greedy tokens must equal
the normal run's, and top-5 logprobs vLLM's own prefix-cache reuse of the same KV, bit for bit.
The same again with every segment on the pinned host tier (read in place), and from the host
tier with the client's prefetch hint. One JSON line per case goes to ``--out``.

    python scripts/device/theorem3.py --model .device/models/llama-3.1-8b \\
        --tokenizer .device/tokenizer --out $OUT/t3.jsonl [--cudagraph-mode FULL]

FP8: ``--kv-cache-dtype fp8`` serves vLLM's e4m3 cache (per-layer scales); facts captured from
it are its bytes, so injection in place must again equal vLLM's own FP8 prefix-cache reuse bit
for bit. ``--fact-kv-dtype fp8_e4m3`` over a bf16 cache stores facts as e4m3 with row scales:
then the rows report fidelity (greedy tokens, largest logprob gap), not bitwise equality.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpu_runtime.client import protocol as p
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.types import EncodingConfig, FactKey, MemorySegment, Span, TenantId


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokenizer", required=True, help="any tokenizer dir (ids are random)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--cudagraph-mode", help="e.g. FULL (default: vLLM's FULL_AND_PIECEWISE)")
    parser.add_argument("--kv-cache-dtype", default="auto", help="vLLM's cache: auto or fp8")
    parser.add_argument("--fact-kv-dtype", default="native", help="facts: native or fp8_e4m3")
    args = parser.parse_args()

    engine: dict[str, object] = {"skip_tokenizer_init": True, "max_num_seqs": 8}
    if args.cudagraph_mode:
        engine["compilation_config"] = {"cudagraph_mode": args.cudagraph_mode}
    kv_dir = tempfile.mkdtemp(prefix="t3-kv-")
    env = {
        "INFERSCALE_MODEL_PATH": str(Path(args.model).resolve()),
        "INFERSCALE_TOKENIZER_PATH": str(Path(args.tokenizer).resolve()),
        "INFERSCALE_LOAD_FORMAT": "dummy",
        "INFERSCALE_DTYPE": "bfloat16",
        "INFERSCALE_MAX_MODEL_LEN": "2048",
        "INFERSCALE_KV_STORE_DIR": kv_dir,
        "INFERSCALE_GPU_POOL_BYTES": str(1 << 30),
        "INFERSCALE_HOST_POOL_BYTES": str(1 << 30),
        "INFERSCALE_POOL_SLAB_BYTES": str(1 << 20),
        "INFERSCALE_SCRUB_INJECTED_BLOCKS": "1",
        "INFERSCALE_GPU_MEMORY_UTILIZATION": "0.8",
        "INFERSCALE_ENGINE_ARGS": json.dumps(engine),
        "INFERSCALE_KV_CACHE_DTYPE": args.kv_cache_dtype,
        "INFERSCALE_FACT_KV_DTYPE": args.fact_kv_dtype,
    }
    started = time.perf_counter()
    server = RuntimeProcess(env, log=Path(kv_dir) / "runtime.log").start(timeout_s=900)
    try:
        client = RuntimeClient(server.url, os.environ.get("INFERSCALE_SERVICE_TOKEN",
                                                          "dev-service-token"))  # fmt: skip
        rows = run_cases(client, args.max_tokens, time.perf_counter() - started)
        for row in rows:
            row.update(kv_cache_dtype=args.kv_cache_dtype, fact_kv_dtype=args.fact_kv_dtype)
    finally:
        server.stop()
    with open(args.out, "a") as fh:
        for row in rows:
            fh.write(json.dumps(row) + "\n")


def run_cases(client: RuntimeClient, max_tokens: int, start_s: float) -> list[dict[str, object]]:
    model = client.model()
    vocab, block = model.vocab_size, model.block_size
    rng = random.Random(0)
    tenant, config = TenantId("device"), EncodingConfig(model.encoding_model, 0, 1)

    def prompt(preamble: int, facts: list[int], query: int) -> tuple[list[int], MemorySegment]:
        ids = [rng.randrange(100, vocab - 100) for _ in range(preamble)]
        spans = [Span(FactKey.for_fact(tenant, f"pre-{rng.random()}", 0, config), 0, preamble)]
        for i, n in enumerate(facts):
            key = FactKey.for_fact(tenant, f"fact-{i}-{rng.random()}", 1, config)
            spans.append(Span(key, len(ids), n))
            ids += [rng.randrange(100, vocab - 100) for _ in range(n)]
        ids += [rng.randrange(100, vocab - 100) for _ in range(query)]
        return ids, MemorySegment(tenant, config, tuple(spans))

    def run(ids: list[int], segment: MemorySegment | None, shared: bool = True):  # type: ignore[no-untyped-def]
        request = p.GenerateRequest(
            tenant=tenant.value, token_ids=ids, mode="kv" if segment else "prompt",
            segment=p.segment_model(segment) if segment else None,
            sampling=p.SamplingModel(max_tokens=max_tokens, logprobs=5, ignore_eos=True,
                                     prefix_cache=shared),
        )  # fmt: skip
        events = list(client.generate(request))
        tokens = [t for e in events for t in e.token_ids]
        logprobs = [dict(step) for e in events for step in (e.logprobs or [])]
        usage = events[-1].usage
        assert usage is not None
        return tokens, logprobs, usage

    def keys(segment: MemorySegment) -> p.KeysRequest:
        return p.KeysRequest(tenant=tenant.value, keys=[p.key_model(s.key) for s in segment.spans])

    rows: list[dict[str, object]] = []
    cases = (
        ("aligned", [16, 16, 16, 16], 24),
        ("unaligned", [13, 21, 9, 17], 24),
        # One token left to compute: with CUDA graphs vLLM replays a FULL graph for this step,
        # so no per-layer hook runs and host-tier facts must be read before the forward.
        ("one-token-query", [13, 21, 9, 17], 1),
    )
    for name, facts, query in cases:
        ids, segment = prompt(32, facts, query)
        captured = client.encode(p.EncodeRequest(
            tenant=tenant.value, window=0,
            items=[p.EncodeItemModel(token_ids=ids,
                                     capture=[p.span_model(s) for s in segment.spans])],
        ))  # fmt: skip
        assert not captured.missing, captured
        one_shot, lp_one, _ = run(ids, None, shared=False)
        run(ids, None)  # fills vLLM's prefix cache ...
        reused, lp_reused, reuse = run(ids, None)  # ... and reuses it
        injected, lp_inj, inj = run(ids, segment, shared=False)
        demote = p.DemoteRequest(tenant=tenant.value, keys=keys(segment).keys, tier="host")
        client.demote(demote)
        host_tiers = client.placement(keys(segment))
        from_host, lp_host, _ = run(ids, segment, shared=False)
        client.demote(demote)
        client.prefetch(keys(segment))
        prefetched, lp_prefetched, _ = run(ids, segment, shared=False)
        max_lp = max(
            (abs(lp_one[i][t] - lp_inj[i][t]) for i in range(len(lp_inj)) for t in lp_inj[i]
             if t in lp_one[i]), default=0.0,
        )  # fmt: skip
        rows.append({
            "model": model.model, "case": name, "served_by": "runtime service (HTTP)",
            "workers": model.workers, "block_size": block, "prompt_tokens": len(ids),
            "segment_tokens": segment.end, "injected_tokens": inj.injected_tokens,
            "prefix_cache_tokens_reused": reuse.cached_tokens,
            "greedy_equal_normal_vs_injected": injected == one_shot,
            "greedy_equal_reused_vs_injected": injected == reused,
            "top5_logprobs_bitwise_reused_vs_injected": lp_inj == lp_reused,
            "max_abs_logprob_diff_normal_vs_injected": max_lp,
            "host_tier_before_read": host_tiers,
            "greedy_equal_host_tier_vs_injected": from_host == injected,
            "top5_logprobs_bitwise_host_tier_vs_reused": lp_host == lp_reused,
            "greedy_equal_prefetched_vs_injected": prefetched == injected,
            "top5_logprobs_bitwise_prefetched_vs_reused": lp_prefetched == lp_reused,
            "runtime_start_s": round(start_s, 1),
        })  # fmt: skip
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "workers"}), flush=True)
    return rows


if __name__ == "__main__":
    main()
