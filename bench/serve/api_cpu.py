"""What one chat costs the API process in CPU time, against a running stack: the CPU seconds
the API's process tree spent (``/proc/<pid>/stat`` of the process and its children: every
uvicorn worker) over N sequential streaming chats of the official OpenAI SDK, less what it
spends idle over the same wall time (measured just before), divided by N;
beside it each chat's TTFT parts (medians), as ``inferscale bench serve`` splits them.

At 100 users the platform's host CPUs are the bound (docs/benchmarks.md, run 9): the API's CPU
per chat says how many chats a core of it can start and stream. Profile the same loop with
py-spy (``py-spy record -p PID --gil -f raw``) to see where that time goes.

    python -m bench.serve.api_cpu --api-pid PID [--runtime-pid PID] [--chats 100]
        [--modes kv,prompt] [--k 50] [--out FILE]

With ``--runtime-pid`` the runtime server's own process is metered the same way (the process,
not its engine core child): the event loop that every chat's embed, prefetch and generate
calls share on the GPU host.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.serve.chats import platform_chat, sdks_for
from bench.serve.host_cpu import proc_stat
from bench.serve.serve import ServeBench, part_medians


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its live descendants (uvicorn's workers)."""
    stats = [proc_stat(p) for p in (pid, *_children(pid))]
    return sum(stat.cpu_s for stat in stats if stat is not None)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        listed = (task / "children").read_text().split()
        for child in map(int, listed):
            found += [child, *_children(child)]
    return found


def runtime_cpu_seconds(pid: int) -> float:
    """User + system CPU of the runtime's server process alone (every thread of it: its event
    loop, vLLM's output handler, the query embedder), not of its children (vLLM's engine core,
    whose step loop runs apart and is bound by the device, not by this process)."""
    stat = proc_stat(pid)
    return stat.cpu_s if stat is not None else 0.0


async def measure(
    bench: ServeBench, pid: int, mode: str, k: int, chats: int, idle_s: float = 10.0,
    runtime_pid: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    meters: dict[str, Callable[[], float]] = {"api": lambda: cpu_seconds(pid)}
    if runtime_pid is not None:
        meters["runtime"] = lambda: runtime_cpu_seconds(runtime_pid)

    workload = bench.workload(mode, k, chats)
    sdk = sdks_for(workload)[0]
    try:
        await bench.warm_up([sdk], [mode], k)  # the user's index, the facts' tokens
        # What each burns doing nothing (threads' timers, probes): taken off per second.
        idle0, t0 = {n: m() for n, m in meters.items()}, time.perf_counter()
        await asyncio.sleep(idle_s)
        idled = time.perf_counter() - t0
        idle_rate = {n: (m() - idle0[n]) / idled for n, m in meters.items()}
        cpu0, wall0 = {n: m() for n, m in meters.items()}, time.perf_counter()
        samples = [await platform_chat(sdk, workload, i) for i in range(chats)]
        cpu1, wall1 = {n: m() for n, m in meters.items()}, time.perf_counter()
    finally:
        await sdk.close()
    per_chat: dict[str, Any] = {}
    for name in meters:
        gross = (cpu1[name] - cpu0[name]) / chats
        per_chat[f"{name}_cpu_ms_per_chat"] = 1000 * (
            gross - idle_rate[name] * (wall1 - wall0) / chats
        )
        per_chat[f"{name}_cpu_ms_per_chat_gross"] = 1000 * gross
        per_chat[f"{name}_idle_cpu_ms_per_s"] = 1000 * idle_rate[name]
    return {
        "mode": mode, "k": k, "chats": chats, **per_chat,
        "wall_ms_per_chat": 1000 * (wall1 - wall0) / chats,
        "client_ttft_ms_median": statistics.median(s.client_ttft_ms for s in samples),
        "parts_median_ms": part_medians(samples),
        "query_embedded_on": sorted({str(s.query_embedded_on) for s in samples}),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from backend.core.config import get_settings
    from backend.core.paths import locomo_dir

    settings = get_settings()
    parser = argparse.ArgumentParser(prog="python -m bench.serve.api_cpu")
    parser.add_argument("--api", default=f"http://127.0.0.1:{settings.api_port}")
    parser.add_argument("--api-pid", type=int, required=True, help="the API's (parent) process")
    parser.add_argument(
        "--runtime-pid", type=int,
        help="the runtime server's process: its CPU per chat too (not its engine core's)",
    )  # fmt: skip
    parser.add_argument("--chats", type=int, default=100)
    parser.add_argument("--modes", default="kv,prompt")
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--conversation", default=str(locomo_dir() / "conv-30.json"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    bench = ServeBench(args.api, settings.admin_api_key, args.max_tokens, warmup=8)
    bench.prepare(Path(args.conversation), log=lambda line: print(line, flush=True))
    rows = []
    for mode in args.modes.split(","):
        print(f"==> {mode}: {args.chats} chats at k={args.k}", flush=True)
        row = asyncio.run(
            measure(bench, args.api_pid, mode, args.k, args.chats, runtime_pid=args.runtime_pid)
        )
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"max_tokens": args.max_tokens, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
