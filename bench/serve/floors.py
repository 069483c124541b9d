"""``inferscale bench floors``: what a chat's path through the API costs before any of its own
work, on this host. A chat crosses two HTTP hops (the tenant's app to the API, the API to the
runtime), reads Postgres (the user's revision) and Redis (the tenant's admission), and hops
threads; this times each of those alone, with the clients and settings the platform uses:

* ``client_hop``: the official OpenAI SDK (its aiohttp transport, as ``bench serve``) streaming
  a chat from a bare uvicorn + Starlette app (``floor_app.py``) that answers at once: sent to
  the first content chunk;
* ``runtime_hop``: aiohttp, as the API's runtime client, posting a generate-sized body to the
  same bare app and reading its first streamed line;
* ``thread_hop``: one call through the event loop's thread pool, as a route's blocking work;
* ``postgres``: a read session's first query, as a chat's user lookup (the pool's checkout with
  its ping, ``SELECT 1``);
* ``redis``: one GET, as the admission's and the key cache's round trips.

The probes take turns (one of each per round), so a load on the host hits them alike.
``floor_ms`` adds one of each: the least a chat pays by this design, whatever the code does.

    python -m bench floors [--rounds 300] [--body-tokens 1800] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx
from fastapi.concurrency import run_in_threadpool

from bench.serve.chats import http_client
from bench.serve.serve import summarize

PROBES = ("client_hop", "runtime_hop", "thread_hop", "postgres", "redis")
WARMUP_ROUNDS = 20


def start_bare_app(port: int, log: Path) -> subprocess.Popen[bytes]:
    """The bare app in a process of its own, as the API and the runtime run; once it answers."""
    command = [sys.executable, "-m", "uvicorn", "bench.serve.floor_app:app", "--host",
               "127.0.0.1", "--port", str(port), "--log-level", "warning",
               "--timeout-keep-alive", "75"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text()[-2000:]
            raise RuntimeError(f"the bare app exited ({proc.returncode}): {tail}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the bare app did not answer in 60 s: {log.read_text()[-2000:]}")


def _since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


class Probes:
    """One timed call of each probe (ms); the clients are opened once, as the platform's are."""

    def __init__(self, base_url: str, body_tokens: int) -> None:
        import openai
        import redis

        from backend.core.config import get_settings

        settings = get_settings()
        self.base_url = base_url
        self.sdk = openai.AsyncOpenAI(api_key="floor", base_url=f"{base_url}/v1", max_retries=0,
                                      http_client=http_client())  # fmt: skip
        self.session = aiohttp.ClientSession(
            headers={"content-type": "application/json"},
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=30),
        )
        # The size of a k=50 generate request's body: its token ids dominate it.
        self.body = json.dumps({"token_ids": list(range(32000, 32000 + body_tokens))}).encode()
        self.redis = redis.Redis.from_url(settings.redis_url)

    def calls(self) -> dict[str, Callable[[], Awaitable[float]]]:
        return {"client_hop": self.client_hop, "runtime_hop": self.runtime_hop,
                "thread_hop": self.thread_hop, "postgres": self.postgres,
                "redis": self.redis_get}  # fmt: skip

    async def client_hop(self) -> float:
        started = time.perf_counter()
        stream = await self.sdk.chat.completions.create(
            model="floor", stream=True, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                took = _since(started)
                break
        else:
            raise RuntimeError("the bare app streamed no content")
        async for _ in stream:  # the rest, so the connection goes back to the pool
            pass
        return took

    async def runtime_hop(self) -> float:
        started = time.perf_counter()
        async with self.session.post(f"{self.base_url}/v1/generate", data=self.body) as response:
            response.raise_for_status()
            async for data in response.content.iter_any():
                if data:
                    took = _since(started)
                    break
            else:
                raise RuntimeError("the bare app streamed nothing")
            await response.read()
        return took

    async def thread_hop(self) -> float:
        started = time.perf_counter()
        await run_in_threadpool(time.perf_counter)
        return _since(started)

    async def postgres(self) -> float:
        return await run_in_threadpool(_postgres_read)

    async def redis_get(self) -> float:
        return await run_in_threadpool(self._redis_get)

    def _redis_get(self) -> float:
        started = time.perf_counter()
        self.redis.get("inferscale:bench:floor")
        return _since(started)

    async def close(self) -> None:
        await self.sdk.close()
        await self.session.close()
        self.redis.close()


def _postgres_read() -> float:
    from sqlalchemy import select

    from backend.db.session import read_session_factory

    started = time.perf_counter()
    with read_session_factory()() as session:
        session.scalar(select(1))
    return _since(started)


async def measure(base_url: str, rounds: int, body_tokens: int) -> dict[str, list[float]]:
    probes = Probes(base_url, body_tokens)
    samples: dict[str, list[float]] = {name: [] for name in PROBES}
    try:
        calls = probes.calls()
        for round_ in range(WARMUP_ROUNDS + rounds):
            for name in PROBES:
                took = await calls[name]()
                if round_ >= WARMUP_ROUNDS:
                    samples[name].append(took)
    finally:
        await probes.close()
    return samples


def summary(samples: dict[str, list[float]]) -> dict[str, Any]:
    probes = {name: summarize(values) for name, values in samples.items()}
    return {"probes_ms": probes, "floor_ms": sum(p["median"] for p in probes.values())}


def markdown(result: dict[str, Any]) -> str:
    probes = result["probes_ms"]
    lines = ["| probe | p50 ms | p95 ms | min ms |", "|---|---|---|---|"]
    lines += [f"| {name} | {p['median']:.3f} | {p['p95']:.3f} | {p['min']:.3f} |"
              for name, p in probes.items()]  # fmt: skip
    lines.append(f"| **one of each (floor_ms)** | **{result['floor_ms']:.3f}** | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferscale bench floors")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--body-tokens", type=int, default=1800, help="the runtime hop's body")
    parser.add_argument("--port", type=int, default=8097, help="the bare app's")
    parser.add_argument("--out", type=Path, help="a directory: floors.json and floors.md")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    log = (args.out or Path(os.environ.get("TMPDIR", "/tmp"))) / "floor-app.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    app = start_bare_app(args.port, log)
    try:
        url = f"http://127.0.0.1:{args.port}"
        samples = asyncio.run(measure(url, args.rounds, args.body_tokens))
    finally:
        app.terminate()
        app.wait(timeout=30)
    result = {"rounds": args.rounds, "body_tokens": args.body_tokens, **summary(samples),
              "samples_ms": samples}  # fmt: skip
    print(markdown(result), end="")
    if args.out:
        (args.out / "floors.json").write_text(json.dumps(result, indent=1))
        (args.out / "floors.md").write_text(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
