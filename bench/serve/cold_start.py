"""A fresh API's first concurrent requests: N memory searches at once, right after its processes
start (what 100 users meet after a deploy or a restart).

    python -m bench.serve.cold_start setup --api URL --admin-key KEY   # a tenant, one memory
    (restart the API: every process cold)
    python -m bench.serve.cold_start fire --api URL --requests 40      # one JSON line

``setup`` writes the tenant's key to ``--key-file``; ``fire`` reads it. The API may run without
a runtime: searches then embed their queries in the API (the path the first chats took).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx


def setup(api: str, admin_key: str, key_file: Path) -> None:
    with httpx.Client(base_url=api, timeout=60) as client:
        admin = {"Authorization": f"Bearer {admin_key}"}
        created = client.post("/v1/tenants", json={"name": f"cold-{time.time_ns()}"}, headers=admin)
        created.raise_for_status()
        key = created.json()["api_key"]
        added = client.post(
            "/v1/memories",
            json={"messages": [{"role": "user", "content": "I adopted a greyhound named Bolt."}],
                  "user_id": "u1", "infer": False},
            headers={"Authorization": f"Bearer {key}"},
        )  # fmt: skip
        added.raise_for_status()
    key_file.write_text(key)


async def fire(api: str, key: str, n: int, label: str) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=max(100, n))
    async with httpx.AsyncClient(base_url=api, timeout=120, limits=limits) as client:

        async def one(i: int) -> float:
            sent = time.perf_counter()
            response = await client.post(
                "/v1/memories/search",
                json={"query": f"what dog do I have {i}", "user_id": "u1"},
                headers=headers,
            )
            response.raise_for_status()
            return (time.perf_counter() - sent) * 1000

        began = time.perf_counter()
        ms = sorted(await asyncio.gather(*(one(i) for i in range(n))))
        wall = time.perf_counter() - began
    return {
        "label": label, "n": n, "p50_ms": round(statistics.median(ms), 1),
        "p95_ms": round(ms[min(n - 1, round(0.95 * (n - 1)))], 1), "max_ms": round(ms[-1], 1),
        "wall_s": round(wall, 2),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.serve.cold_start")
    parser.add_argument("step", choices=["setup", "fire"])
    parser.add_argument("--api", default="http://127.0.0.1:8000")
    parser.add_argument("--admin-key", default="dev-admin-key")
    parser.add_argument("--key-file", type=Path, default=Path("/tmp/inferscale-cold-start.key"))
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    if args.step == "setup":
        setup(args.api, args.admin_key, args.key_file)
    else:
        result = asyncio.run(fire(args.api, args.key_file.read_text(), args.requests, args.label))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
