"""The query's embedding against a busy runtime event loop, as at 100 users on a GPU host.

    python -m bench.runtime.embed_under_load [--runtime URL] [--loads 0,8] [--samples 30]
        [--label NAME] [--out FILE]

Against a running runtime that serves ``/v1/embed``: ``load`` concurrent clients keep its
event loop busy with ``/v1/contains`` of 50 keys each (pure event-loop work, no engine), while
one client times ``/v1/embed`` of one question and then ``/healthz`` (how long the loop itself
takes to answer), ``samples`` times. If an embedding waits far longer than the loop's own
answer, it is not the loop's queue that holds it but the handoff to where the pass runs
(``INFERSCALE_QUERY_EMBEDDER_RUNS_ON``: a worker thread or the loop). Start the runtime with
``INFERSCALE_QUERY_EMBEDDER=on`` on a CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

QUESTION = "What did Melanie paint last May?"


async def measure(url: str, token: str, load: int, samples: int) -> dict[str, Any]:
    import aiohttp

    headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"}
    keys = [{"fact_id": f"f{i}", "fact_version": 1, "window": 0, "encoding_version": 1}
            for i in range(50)]  # fmt: skip
    contains = json.dumps({"tenant": "embed-under-load", "keys": keys})
    embed = json.dumps({"texts": [QUESTION]})
    async with aiohttp.ClientSession(base_url=url, headers=headers) as http:
        running, served = True, 0

        async def busy() -> None:
            nonlocal served
            while running:
                async with http.post("/v1/contains", data=contains) as answer:
                    await answer.read()
                    served += 1

        loaders = [asyncio.ensure_future(busy()) for _ in range(load)]
        await asyncio.sleep(2)  # the load at its steady state
        embed_ms, loop_ms = [], []
        started, served0 = time.perf_counter(), served
        for _ in range(samples):
            sent = time.perf_counter()
            async with http.post("/v1/embed", data=embed) as answer:
                if answer.status != 200:
                    raise RuntimeError(f"/v1/embed: {answer.status} {await answer.text()}")
                await answer.read()
            embed_ms.append((time.perf_counter() - sent) * 1000)
            sent = time.perf_counter()
            async with http.get("/healthz") as answer:
                await answer.read()
            loop_ms.append((time.perf_counter() - sent) * 1000)
            await asyncio.sleep(0.05)
        rate = (served - served0) / (time.perf_counter() - started)
        running = False
        await asyncio.gather(*loaders)
    return {
        "load": load, "contains_per_s": rate,
        "embed_ms_p50": statistics.median(embed_ms), "embed_ms_max": max(embed_ms),
        "healthz_ms_p50": statistics.median(loop_ms),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from gpu_runtime.config import RuntimeSettings

    settings = RuntimeSettings()
    parser = argparse.ArgumentParser(prog="python -m bench.runtime.embed_under_load")
    parser.add_argument("--runtime", default="http://127.0.0.1:8100")
    parser.add_argument("--loads", default="0,8")
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--label", default=settings.query_embedder_runs_on)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for load in (int(n) for n in args.loads.split(",")):
        row = {"runs_on": args.label, **asyncio.run(
            measure(args.runtime, settings.service_token, load, args.samples)
        )}  # fmt: skip
        print(f"{args.label}: load {load}: {row['contains_per_s']:.0f} contains/s, embed p50 "
              f"{row['embed_ms_p50']:.1f} ms (max {row['embed_ms_max']:.1f}), /healthz p50 "
              f"{row['healthz_ms_p50']:.1f} ms", flush=True)  # fmt: skip
        rows.append(row)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
