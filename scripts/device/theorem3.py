"""Theorem 3 on a GPU (vLLM 0.26 CUDA, FLASH_ATTN): normal run vs injected run in one engine.

Real architectures with dummy weights (``load_format="dummy"``) and random token ids: for each
model the segment's KV is captured from a normal prefill, then injected into scrubbed blocks of a
fresh request; greedy tokens must be identical to the normal run (and to vLLM's own prefix-cache
reuse of the same KV). Writes one JSON line per model to ``--out``.

    python scripts/device/theorem3.py --model .device/models/llama-3.1-8b --out $OUT/t3.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument(
        "--cuda-graphs", action="store_true", help="vLLM's CUDA graphs (FULL for decode-only steps)"
    )
    parser.add_argument("--cudagraph-mode", help="with --cuda-graphs: e.g. FULL (prefills too)")
    args = parser.parse_args()

    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.connector.wire import encode_params
    from gpu_runtime.engine import build_injection_llm
    from gpu_runtime.types import EncodingConfig, FactKey, Span, TenantId, cache_salt

    model = str(Path(args.model).resolve())
    eager = not args.cuda_graphs
    settings = RuntimeSettings(max_model_len=2048, enforce_eager=eager, dtype="bfloat16")
    started = time.perf_counter()
    import tempfile

    from gpu_runtime.store.memory import PoolBudget

    budget = PoolBudget(1 << 30, 1 << 30, 1 << 20)  # the tiered pool: the fused CUDA loader
    mode = args.cudagraph_mode
    graphs = {"compilation_config": {"cudagraph_mode": mode}} if mode else {}
    llm = build_injection_llm(
        settings,
        store_name="device",
        disk_root=tempfile.mkdtemp(prefix="t3-kv-"),
        pool=budget,
        scrub_blocks=True,
        model=model,
        extra_engine_args={
            "load_format": "dummy",
            "skip_tokenizer_init": True,
            "gpu_memory_utilization": 0.8,
            "max_num_seqs": 8,
            **graphs,
        },
    )
    vllm_config = llm.llm_engine.vllm_config
    block = int(vllm_config.cache_config.block_size)
    vocab = int(vllm_config.model_config.hf_config.vocab_size)
    rng = random.Random(0)
    tenant, config = TenantId("device"), EncodingConfig(Path(model).name, 0, 1)

    def prompt(preamble: int, facts: list[int], query: int) -> tuple[list[int], tuple[Span, ...]]:
        ids = [rng.randrange(100, vocab - 100) for _ in range(preamble)]
        spans = [
            Span(FactKey(tenant, f"pre-{len(ids)}-{rng.random()}", 0, config.model, 0), 0, preamble)
        ]
        for i, n in enumerate(facts):
            spans.append(
                Span(FactKey.for_fact(tenant, f"fact-{i}-{rng.random()}", 1, config), len(ids), n)
            )
            ids += [rng.randrange(100, vocab - 100) for _ in range(n)]
        ids += [rng.randrange(100, vocab - 100) for _ in range(query)]
        return ids, tuple(spans)

    def run(ids: list[int], salt: str, params: dict | None):  # type: ignore[type-arg]
        sampling = SamplingParams(
            temperature=0.0,
            max_tokens=args.max_tokens,
            logprobs=5,
            detokenize=False,
            ignore_eos=True,
            extra_args={"kv_transfer_params": params} if params else None,
        )
        out = llm.generate(
            [TokensPrompt(prompt_token_ids=ids, cache_salt=salt)], sampling, use_tqdm=False
        )[0]
        lps = [{t: lp.logprob for t, lp in step.items()} for step in out.outputs[0].logprobs]
        return list(out.outputs[0].token_ids), lps, int(out.num_cached_tokens or 0)

    results = []
    cases = (
        ("aligned", [16, 16, 16, 16], 24),
        ("unaligned", [13, 21, 9, 17], 24),
        # One token left to compute: with CUDA graphs vLLM replays a FULL graph for this step,
        # so no per-layer hook runs and host-tier facts must be read before the forward.
        ("one-token-query", [13, 21, 9, 17], 1),
    )
    for name, facts, query in cases:
        ids, spans = prompt(32, facts, query)
        plain_salt = cache_salt(tenant, f"plain-{name}")
        one_shot, lp_one, _ = run(ids, plain_salt, encode_params(tenant, config, capture=spans))
        reused, lp_reused, cached = run(ids, plain_salt, None)
        injected, lp_inj, claimed = run(
            ids,
            cache_salt(tenant, config.fingerprint() + name),
            encode_params(tenant, config, inject=spans),
        )
        max_lp = max(
            abs(lp_one[i][t] - lp_inj[i][t])
            for i in range(len(lp_inj))
            for t in lp_inj[i]
            if t in lp_one[i]
        )
        # The same injection with every segment on the pinned host tier (read in place).
        from gpu_runtime.pool.index import Tier
        from gpu_runtime.store.memory import store_named

        pool = store_named("device", None, None)
        pool.demote(tenant, [s.key for s in spans], Tier.HOST)  # type: ignore[attr-defined]
        from_host, lp_host, _ = run(
            ids,
            cache_salt(tenant, config.fingerprint() + name + "host"),
            encode_params(tenant, config, inject=spans),
        )
        # And once more from the host tier with the runtime's prefetch (async copy to GPU).
        pool.demote(tenant, [s.key for s in spans], Tier.HOST)  # type: ignore[attr-defined]
        pool.prefetch(tenant, [s.key for s in spans])  # type: ignore[attr-defined]
        prefetched, lp_prefetched, _ = run(
            ids,
            cache_salt(tenant, config.fingerprint() + name + "prefetch"),
            encode_params(tenant, config, inject=spans),
        )
        results.append(
            {
                "model": Path(model).name,
                "greedy_equal_prefetched_vs_injected": prefetched == injected,
                "top5_logprobs_bitwise_prefetched_vs_reused": lp_prefetched == lp_reused,
                "greedy_equal_host_tier_vs_injected": from_host == injected,
                "top5_logprobs_bitwise_host_tier_vs_reused": lp_host == lp_reused,
                "host_tier_stats": pool.stats(tenant),  # type: ignore[attr-defined]
                "case": name,
                "cudagraph_mode": str(vllm_config.compilation_config.cudagraph_mode),
                "block_size": block,
                "prompt_tokens": len(ids),
                "segment_tokens": spans[-1].end,
                "injected_tokens_claimed": claimed,
                "prefix_cache_tokens_reused": cached,
                "greedy_equal_normal_vs_injected": injected == one_shot,
                "greedy_equal_reused_vs_injected": injected == reused,
                "top5_logprobs_bitwise_reused_vs_injected": lp_inj == lp_reused,
                "max_abs_logprob_diff_normal_vs_injected": max_lp,
                "engine_start_s": round(time.perf_counter() - started, 1),
            }
        )
        print(json.dumps(results[-1]), flush=True)
    with open(args.out, "a") as fh:
        for row in results:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
