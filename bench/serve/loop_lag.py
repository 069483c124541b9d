"""How late the bench client's own event loop runs during a cell: a coroutine sleeps 10 ms over
and over and records how much later than asked it woke. One Python process drives every user's
OpenAI SDK stream (and, for the peer, Mem0's search), so a lag of tens of ms is time that the
client-side parts of a TTFT ("client→API" above all) count but neither stack spent."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType

TICK_S = 0.01


class LoopLag:
    """``async with LoopLag() as lag:`` around a cell; then ``lag.ms`` holds each wake-up's
    delay in ms."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._running = False

    async def _probe(self) -> None:
        while self._running:
            asked = time.perf_counter()
            await asyncio.sleep(TICK_S)
            self.ms.append(max(0.0, (time.perf_counter() - asked - TICK_S) * 1000))

    async def __aenter__(self) -> LoopLag:
        self._running = True
        self._task = asyncio.ensure_future(self._probe())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._running = False
        if self._task is not None:
            await self._task
