"""``inferscale bench fairness``: the noisy-neighbour benchmark against a running stack.

make demo INFERSCALE_DEMO_KEEP=1 &     # or any running stack (the runtime reachable here)
inferscale bench fairness --users 40 --b-requests 30 --out runs/fairness
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from backend.core.config import get_settings
    from bench.serve.fairness import FairnessBench, markdown

    settings = get_settings()
    parser = argparse.ArgumentParser(prog="inferscale bench fairness")
    parser.add_argument("--api", default=f"http://127.0.0.1:{settings.api_port}")
    parser.add_argument("--runtime", default=settings.runtime_replica_urls[0])
    parser.add_argument("--users", type=int, default=40, help="tenant A's concurrent users")
    parser.add_argument("--b-requests", type=int, default=30, help="tenant B's, each phase")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--mode", default="kv")
    parser.add_argument("--max-tokens", type=int, default=8)
    sizes_help = "fair-gate sizes, comma-separated (default: as configured)"
    parser.add_argument("--slots", default="", help=sizes_help)
    parser.add_argument("--wide-slots", type=int, default=256,
                        help="the open gate's slots (the engine's max_num_seqs)")  # fmt: skip
    parser.add_argument("--flood-processes", type=int, default=4,
                        help="processes driving A's users (B stays in this one)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("runs/fairness"))
    args = parser.parse_args(argv)

    import httpx

    bench = FairnessBench(args.api, settings.admin_api_key, args.runtime, settings.service_token,
                          args.max_tokens, args.k, args.mode)  # fmt: skip
    bench.prepare()
    sizes = [int(x) for x in args.slots.split(",") if x]
    phases = asyncio.run(bench.run(args.users, args.b_requests, args.wide_slots, sizes or None,
                                   args.flood_processes))  # fmt: skip
    ready = httpx.get(f"{args.api}/readyz", timeout=10).json()
    result = {
        "model": ready.get("model", "?"), "device": f"{platform.node()} ({platform.machine()})",
        "users": args.users, "b_requests": args.b_requests, "k": args.k, "mode": args.mode,
        "max_tokens": args.max_tokens, "flood_processes": args.flood_processes, "phases": phases,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fairness.json").write_text(json.dumps(result, indent=1))
    (args.out / "fairness.md").write_text(markdown(result))
    print(markdown(result))
    print(f"wrote {args.out / 'fairness.json'} and {args.out / 'fairness.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
