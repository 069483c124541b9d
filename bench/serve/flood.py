"""Tenant A's flood for ``bench fairness``, driven from processes of its own.

One process used to drive A's users and B's chats. Under the open gate on the GPU host A was
served ~190 chats/s, about 2,000 streamed chunks/s parsed by the SDK, and that process's event
loop running late counted in B's latency as if the platform had spent it (one process driving
100 users' streams woke 63 ms late at p95 in ``bench serve``'s run 13: ``clients.py``). Now A's
users are dealt over ``processes`` spawned processes, each with its own loop and SDK client,
and the bench's own process carries only B (its loop's lateness is reported beside B's
figures). A tenant's app would run many processes too.

Each process is started once and floods on ``start`` until ``stop``; it then reports what its
users were served and refused. A refused user waits the ``Retry-After`` it was given, as the
SDK would with retries on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from bench.serve.spawned import Spawned, split

REPLY_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ChatSpec:
    """What every chat of the bench asks, A's and B's alike (each with its tenant's key)."""

    api: str
    questions: tuple[str, ...]
    max_tokens: int
    k: int
    mode: str


@dataclass
class FloodCounts:
    """What A's users got during one phase (summed over the processes)."""

    served: int = 0
    limited: int = 0
    retry_after_s: list[float] = field(default_factory=list)
    server_errors: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # anything else, by kind

    def add(self, other: FloodCounts) -> None:
        self.served += other.served
        self.limited += other.limited
        self.retry_after_s += other.retry_after_s
        self.server_errors += other.server_errors
        for kind, count in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + count


async def open_chat(sdk: Any, spec: ChatSpec, index: int) -> Any:
    """One chat's stream, as the official SDK opens it: question ``index`` (cycling)."""
    return await sdk.chat.completions.create(
        model="inferscale", user="u", stream=True, temperature=0, max_tokens=spec.max_tokens,
        messages=[{"role": "user", "content": spec.questions[index % len(spec.questions)]}],
        extra_body={"memory": {"mode": spec.mode, "top_k": spec.k}},
    )  # fmt: skip


async def chat(sdk: Any, spec: ChatSpec, index: int) -> None:
    """One streamed chat, read to its end."""
    async for _ in await open_chat(sdk, spec, index):
        pass


async def _flood(sdk: Any, spec: ChatSpec, users: list[int], stop: asyncio.Event) -> FloodCounts:
    import openai

    counts = FloodCounts()

    async def user(first: int) -> None:
        i = first
        while not stop.is_set():
            try:
                await chat(sdk, spec, i)
                counts.served += 1
            except openai.RateLimitError as exc:
                counts.limited += 1
                wait = float(exc.response.headers.get("retry-after", "1"))
                counts.retry_after_s.append(wait)
                await asyncio.sleep(wait)
            except openai.InternalServerError:
                counts.server_errors += 1
            except Exception as exc:  # reported, so the bench can fail loudly
                kind = f"{type(exc).__name__}: {str(exc)[:120]}"
                counts.errors[kind] = counts.errors.get(kind, 0) + 1
            i += 1

    await asyncio.gather(*(user(u) for u in users))
    return counts


def _main(conn: Connection, spec: ChatSpec, key: str, users: list[int]) -> None:
    """Inside a flood process: on "start" its users flood until "stop", then it reports."""
    import openai

    from bench.serve.chats import http_client

    async def serve() -> None:
        sdk = openai.AsyncOpenAI(api_key=key, base_url=f"{spec.api}/v1", max_retries=0,
                                 http_client=http_client())  # fmt: skip
        try:
            await chat(sdk, spec, users[0])  # warm: the connection open before any phase
            conn.send("ready")
            while await asyncio.to_thread(conn.recv) == "start":
                stop = asyncio.Event()
                flooding = asyncio.create_task(_flood(sdk, spec, users, stop))
                await asyncio.to_thread(conn.recv)  # "stop"
                stop.set()
                conn.send(await flooding)
        finally:
            await sdk.close()

    asyncio.run(serve())


class FloodProcesses:
    """``processes`` spawned processes sharing ``users`` flooding users of the tenant whose API
    key is ``key``; ``close`` ends them."""

    def __init__(self, spec: ChatSpec, key: str, users: int, processes: int) -> None:
        shares = split(users, max(1, processes))
        self._spawned = Spawned(_main, [(spec, key, share) for share in shares])
        for reply in self._spawned.replies(REPLY_TIMEOUT_S):
            if reply != "ready":
                raise RuntimeError(f"a flood process did not start: {reply!r}")

    def start(self) -> None:
        self._spawned.send_all("start")

    def stop(self) -> FloodCounts:
        """Ends the flood (each user finishes the chat it is in) and sums what it got."""
        self._spawned.send_all("stop")
        total = FloodCounts()
        for counts in self._spawned.replies(REPLY_TIMEOUT_S):
            total.add(counts)
        return total

    def close(self) -> None:
        self._spawned.close("close")
