"""``inferscale bench serve``: concurrent OpenAI-SDK clients through a running API.

make demo INFERSCALE_DEMO_KEEP=1 &     # or any running stack
inferscale bench serve --users 1,10,50,100 --ks 0,10,50 --out runs/serve
inferscale bench serve --users 200 --ks 50 --modes kv --tenants 20   # spread over replicas
"""

from __future__ import annotations

import argparse
import asyncio
import platform
from pathlib import Path


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    from backend.core.config import get_settings
    from backend.core.paths import locomo_dir
    from bench.serve.chats import FIRST_CELL_QUESTION

    settings = get_settings()
    parser = argparse.ArgumentParser(prog="inferscale bench serve")
    parser.add_argument("--api", default=f"http://127.0.0.1:{settings.api_port}")
    parser.add_argument("--users", default="1,10,50,100")
    parser.add_argument("--ks", default="0,10,50")
    parser.add_argument("--modes", default="kv,prompt")
    parser.add_argument("--requests-per-user", type=int, default=3)
    # Users are spread round-robin over this many tenants (runtime replicas serve tenants).
    parser.add_argument("--tenants", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--conversation", default=str(locomo_dir() / "conv-30.json"))
    parser.add_argument("--out", type=Path, default=Path("runs/serve"))
    parser.add_argument(
        "--peer-url",
        help="also measure the peer: Mem0 + vLLM's OpenAI server "
        "there, answering with the facts in the prompt (bench/serve/peer.py)",
    )
    parser.add_argument("--peer-model", help="the model name vLLM's server serves")
    parser.add_argument(
        "--first-question", type=int, default=FIRST_CELL_QUESTION,
        help="the first cell's first question (then each cell its own): give separate runs "
        "against the same servers separate ranges, so that no prompt is asked twice",
    )  # fmt: skip
    parser.add_argument(
        "--warmup", type=int, default=32,
        help="concurrent warm-up chats per tenant and mode before the first cell (they reach "
        "every API process)",
    )  # fmt: skip
    parser.add_argument(
        "--pid-dir", type=Path,
        help="where the services' NAME.pid files are (each leads its own session): each cell's "
        "CPU is then split by service (bench/serve/host_cpu.py)",
    )  # fmt: skip
    parser.add_argument(
        "--runtime-url",
        help="the runtime's internal API (its service token from the settings): each cell also "
        "reports how late its event loop ran, beside the API's (bench/serve/loop_probes.py)",
    )
    parser.add_argument(
        "--client-processes", type=int, default=1,
        help="spread each cell's users over this many client processes (1: the bench's own), so "
        "that one Python process driving every stream is not what bounds the cell "
        "(bench/serve/clients.py); the peer's cells alike",
    )  # fmt: skip
    parser.add_argument(
        "--stall-s", type=float, default=900.0,
        help="fail with every thread's stack if the warm-up or a cell makes no progress for "
        "this long (0: wait forever; bench/serve/watchdog.py)",
    )  # fmt: skip
    args = parser.parse_args(argv)

    import httpx

    from bench.serve.clients import ClientProcesses
    from bench.serve.host_cpu import CpuMeter, sessions_of
    from bench.serve.loop_probes import LoopProbes
    from bench.serve.report import markdown, write
    from bench.serve.serve import ServeBench, to_rows
    from bench.serve.watchdog import arm, disarm, progress
    from gpu_runtime.client.process_probes import freeze_start_up_heap

    cpu = CpuMeter(sessions_of(args.pid_dir))
    probes = LoopProbes(args.api, args.runtime_url, settings.service_token)

    def clients() -> ClientProcesses | None:
        return ClientProcesses(args.client_processes) if args.client_processes > 1 else None

    bench = ServeBench(
        args.api, settings.admin_api_key, args.max_tokens, args.warmup, cpu, probes, clients()
    )
    arm(args.stall_s)
    bench.prepare(Path(args.conversation), tenants=args.tenants)
    # The client's own full collections over what it loaded (the SDKs, Mem0's store) kept out of
    # the measured TTFTs, the platform's and the peer's alike.
    freeze_start_up_heap()
    cells = asyncio.run(
        bench.run(
            _ints(args.users),
            _ints(args.ks),
            args.modes.split(","),
            args.requests_per_user,
            args.first_question,
        )
    )
    if args.peer_url:
        from bench.serve.peer import PeerBench

        peer = PeerBench(args.peer_url, args.peer_model or "", args.max_tokens, cpu, clients())
        progress()
        peer.prepare(bench.facts(), bench.questions)
        freeze_start_up_heap()
        cells += asyncio.run(peer.run(
            _ints(args.users), _ints(args.ks), args.requests_per_user, args.first_question
        ))  # fmt: skip
    disarm()
    ready = httpx.get(f"{args.api}/readyz", timeout=10).json()
    result = {
        "model": ready.get("model", "?"), "device": f"{platform.node()} ({platform.machine()})",
        "api": args.api, "readyz": ready, "max_tokens": args.max_tokens,
        "requests_per_user": args.requests_per_user, "tenants": args.tenants,
        "client_processes": args.client_processes,
        "imports": bench.imports,
        "peer": {"url": args.peer_url, "model": args.peer_model} if args.peer_url else None,
        "cells": to_rows(cells),
    }  # fmt: skip
    paths = write(result, args.out)
    print(markdown(result))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
