"""The client's loop-lag probe sees a loop that is held: a coroutine that blocks it for 80 ms
shows as a wake-up at least that late, and an idle loop's wake-ups stay far below it."""

from __future__ import annotations

import asyncio
import time

import pytest

from bench.serve.loop_lag import LoopLag

pytestmark = pytest.mark.unit


def test_a_blocked_loop_shows_as_lag_and_an_idle_one_does_not() -> None:
    async def cell(block_s: float) -> list[float]:
        async with LoopLag() as lag:
            await asyncio.sleep(0.1)
            time.sleep(block_s)  # what a CPU-bound client does to every stream it drives
            await asyncio.sleep(0.1)
        return lag.ms

    blocked = asyncio.run(cell(0.08))
    idle = asyncio.run(cell(0.0))
    assert max(blocked) >= 70
    assert len(idle) >= 5 and sorted(idle)[len(idle) // 2] < 20
