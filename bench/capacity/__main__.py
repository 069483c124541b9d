"""``python -m bench.capacity``: facts per tier and the access-skew prediction (markdown
tables, JSON under ``--out``); ``python -m bench.capacity check``: the measured check of
the real pool on the CPU against the prediction; ``python -m bench.capacity api-tier``: the
API processes' bounded retrieval indexes (memory, hit rate, a miss's cost)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.capacity import model
from bench.capacity.shapes import DTYPES, SLAB_BYTES, shape_named
from bench.capacity.simulate import Workload, predict


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def _write(out: Path | None, name: str, data: Any) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(data, indent=2) + "\n")


def _markdown(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def cell(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def model_main(args: argparse.Namespace) -> None:
    rows = model.table(args.gpu_bytes, args.host_bytes, args.disk_bytes, args.tokens)
    print(f"## Facts per tier ({args.tokens} tokens a fact, slabs of {SLAB_BYTES} B)\n")
    cols = ["model", "dtype", "fact_bytes", "slabs_per_fact", "slab_waste", "gpu_facts"]
    cols += ["gpu_facts_poisson_lengths", "host_facts", "disk_facts"]
    print(_markdown(rows, cols) + "\n")
    shape = shape_named(args.model)
    dtype = next(d for d in DTYPES if d.name == args.dtype)
    cap = model.capacity(shape, dtype, args.tokens, args.gpu_bytes, args.host_bytes)
    sims = []
    for users in (int(u) for u in _floats(args.users)):
        for zipf in _floats(args.zipf):
            w = Workload(users, zipf, args.facts, args.k, args.fact_zipf)
            p = predict(w, cap.gpu_facts, cap.host_facts)
            disk_tb = users * args.facts * model.disk_bytes(cap.fact_bytes) / model.TB
            sims.append({"users": users, "zipf": zipf, "disk_tb_needed": disk_tb} | p.as_dict())
    print(f"## Access skew: {shape.name} {dtype.name}, GPU tier {cap.gpu_facts} facts, host")
    print(f"{cap.host_facts} facts; {args.facts} facts a user, k={args.k}\n")
    cols = ["users", "zipf", "gpu_fact_hit", "host_fact_hit", "disk_fact_hit", "requests_all_gpu"]
    cols += ["requests_host_penalty", "requests_prompt_fallback", "ttft_mean_ms", "ttft_p50_ms"]
    print(_markdown(sims, [*cols, "ttft_p90_ms", "disk_tb_needed"]))
    params = vars(args) | {"out": None}
    _write(args.out, "tiers.json", {"params": params, "rows": rows})
    _write(args.out, "simulation.json", {"params": params, "capacity": cap.as_dict(), "rows": sims})


def check_main(args: argparse.Namespace) -> None:
    from bench.capacity.check import run_check  # torch: only for the measured check

    results = []
    for path in args.paths.split(","):
        r = run_check(users=args.users, facts=args.facts, k=args.k, zipf=args.zipf,
                      requests=args.requests, path=path, tenants=args.tenants)  # fmt: skip
        results.append(r.as_dict())
        rows = [{"metric": m, "measured": r.measured[m], "predicted": r.predicted[m]}
                for m in r.measured]  # fmt: skip
        print(f"## Path {path}: {args.users} users x {args.facts} facts of {args.tenants} "
              f"tenant(s), k={args.k}, zipf "
              f"{args.zipf}; GPU {r.gpu_facts} facts, host {r.host_facts}; {r.requests} "
              f"requests counted; {r.seconds:.1f} s\n")  # fmt: skip
        print(_markdown(rows, ["metric", "measured", "predicted"]) + "\n")
        print(f"pool counters: {r.pool_counters}\n")
    _write(args.out, "check.json", results)


def api_tier_main(args: argparse.Namespace) -> None:
    from bench.capacity import api_tier

    rows = [api_tier.predict(int(u), z, args.facts, int(c * 2**20))
            for u in _floats(args.users) for z in _floats(args.zipf)
            for c in _floats(args.cache_mib)]  # fmt: skip
    print(f"## API tier: per-user indexes of {args.facts} facts, bounded LRU per process\n")
    cols = ["users", "zipf", "cache_mib", "all_users_gib", "users_held", "hit_rate"]
    print(_markdown(rows, cols) + "\n")
    checks = [api_tier.check(2000, z, args.facts, 256 * api_tier.per_user_bytes(args.facts),
                             args.requests) for z in (0.8, 1.0)]  # fmt: skip
    print("## The real FactIndex under seeded Zipf traffic, against the prediction\n")
    cols = ["users", "zipf", "cache_mib", "requests", "measured_hit_rate", "predicted_hit_rate"]
    print(_markdown(checks, [*cols, "evictions"]) + "\n")
    miss = api_tier.miss_cost(args.facts)
    print(f"## A miss: {miss['miss_ms']} ms (Postgres + rebuild) against a warm search's "
          f"{miss['warm_search_ms']} ms, {args.facts} facts\n")  # fmt: skip
    _write(args.out, "api_tier.json", {"params": vars(args) | {"out": None}, "predicted": rows,
                                       "checked": checks, "miss": miss})  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity")
    parser.add_argument("--out", type=Path, default=None)
    sub = parser.add_subparsers(dest="command")
    check = sub.add_parser("check", help="measured check of the real pool on the CPU")
    check.add_argument("--out", type=Path, default=None)
    check.add_argument("--users", type=int, default=300)
    check.add_argument("--facts", type=int, default=20)
    check.add_argument("--k", type=int, default=5)
    check.add_argument("--zipf", type=float, default=1.0)
    check.add_argument("--requests", type=int, default=3000)
    check.add_argument("--tenants", type=int, default=1, help="users spread over this many")
    check.add_argument("--paths", default="serving,acquire")
    tier = sub.add_parser("api-tier", help="the API processes' bounded retrieval indexes")
    tier.add_argument("--out", type=Path, default=None)
    tier.add_argument("--users", default="1e4,1e5,1e6")
    tier.add_argument("--zipf", default="0.8,1.0")
    tier.add_argument("--facts", type=int, default=300)
    tier.add_argument("--cache-mib", default="512,4096")
    tier.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--users", default="1e4,1e5,1e6")
    parser.add_argument("--zipf", default="0.8,1.0")
    parser.add_argument("--facts", type=int, default=170)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--fact-zipf", type=float, default=0.0)
    parser.add_argument("--model", default="Llama-3.1-8B")
    parser.add_argument("--dtype", default="bf16", choices=[d.name for d in DTYPES])
    parser.add_argument("--tokens", type=float, default=model.LOCOMO_MEAN_TOKENS)
    parser.add_argument("--gpu-bytes", type=int, default=model.H200_GPU_BYTES)
    parser.add_argument("--host-bytes", type=int, default=model.H200_HOST_BYTES)
    parser.add_argument("--disk-bytes", type=int, default=model.H200_DISK_BYTES)
    args = parser.parse_args(argv)
    commands = {"check": check_main, "api-tier": api_tier_main}
    commands.get(args.command or "", model_main)(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
