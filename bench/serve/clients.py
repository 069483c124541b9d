"""The bench's users spread over several client processes, so the load generator is not the bound.

One Python process drove every user's OpenAI SDK stream: at 100 users on the GPU host it was
busy 0.8 of a core with its event loop waking 63 ms late at p95 (run 13), and every such delay
counts in the client's TTFT and throttles the requests/s it can drive, for the platform and
the peer alike. A tenant's app runs many processes. ``ClientProcesses`` starts ``count`` spawned
processes once; each keeps its event loop, its SDK clients (their connections stay open between
cells) and, for the peer, its own Mem0 ``Memory`` over the same store. A cell hands each
process a share of the users with one start time; each reports its samples, its loop's lag and
when it finished.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from bench.serve.chats import Outcome, Workload, open_memory, run_users, sdks_for
from bench.serve.loop_lag import LoopLag
from bench.serve.spawned import Spawned, split

START_LEAD_S = 0.5  # every process has its share in hand before the common start
REPLY_TIMEOUT_S = 3600.0


@dataclass
class Share:
    """What one client process measured in a cell."""

    outcome: Outcome
    loop_lag_ms: list[float] = field(default_factory=list)
    ended: float = 0.0  # time.time() when its last user finished


class _Client:
    """Inside a client process: a loop, and SDKs and Mem0 stores kept across cells."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.sdks: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
        self.memories: dict[str, Any] = {}

    def _memory(self, workload: Workload) -> Any:
        if workload.peer_store is None:
            return None
        if workload.peer_store not in self.memories:
            self.memories[workload.peer_store] = open_memory(Path(workload.peer_store))
        return self.memories[workload.peer_store]

    def _sdks(self, workload: Workload) -> list[Any]:
        key = (workload.base_url, workload.keys)
        if key not in self.sdks:
            self.sdks[key] = sdks_for(workload)
        return self.sdks[key]

    def warm(self, workload: Workload, users: list[int]) -> Outcome:
        """Untimed: opens the store and the connections the cell's users will use."""
        return self.loop.run_until_complete(
            run_users(workload, users, self._sdks(workload), self._memory(workload))
        )

    def share(self, workload: Workload, users: list[int], start_at: float) -> Share:
        sdks, memory = self._sdks(workload), self._memory(workload)

        async def timed() -> Share:
            await asyncio.sleep(max(0.0, start_at - time.time()))
            async with LoopLag() as lag:
                outcome = await run_users(workload, users, sdks, memory)
            return Share(outcome, lag.ms, time.time())

        return self.loop.run_until_complete(timed())

    def close(self) -> None:
        for sdks in self.sdks.values():
            for sdk in sdks:
                self.loop.run_until_complete(sdk.close())
        self.loop.close()


def _main(conn: Connection) -> None:
    from gpu_runtime.client.process_probes import freeze_start_up_heap

    client = _Client()
    frozen = False
    try:
        while (message := conn.recv()) is not None:
            kind, workload, users, start_at = message
            try:
                if kind == "warm":
                    reply: Any = client.warm(workload, users)
                    if not frozen:  # as the bench's own process: no full passes over imports
                        freeze_start_up_heap()
                        frozen = True
                else:
                    reply = client.share(workload, users, start_at)
            except Exception as exc:  # the parent raises it; the process stays usable
                reply = exc
            conn.send(reply)
    finally:
        client.close()


class ClientProcesses:
    """``count`` client processes, started on first use and stopped by ``close``."""

    def __init__(self, count: int) -> None:
        if count < 2:
            raise ValueError("client processes are for 2 or more; 1 runs in the bench's process")
        self.count = count
        self._spawned: Spawned | None = None

    def _ask(self, messages: list[tuple[str, Workload, list[int], float]]) -> list[Any]:
        if self._spawned is None:
            self._spawned = Spawned(_main, [()] * self.count)
        self._spawned.send(messages)
        return self._spawned.replies(REPLY_TIMEOUT_S, len(messages))

    def run(self, workload: Workload, users: int, warm: bool = True) -> tuple[list[Share], float]:
        """The cell's users over the processes, started together. First, untimed, each process
        runs one chat per user of its share (``warm``) so that its connections are open. Returns
        each process's share and the common start (``time.time()``)."""
        shares = split(users, self.count)
        if warm:
            one = dataclasses.replace(workload, per_user=1)
            self._ask([("warm", one, share, 0.0) for share in shares])
        start_at = time.time() + START_LEAD_S
        return self._ask([("cell", workload, share, start_at) for share in shares]), start_at

    def close(self) -> None:
        if self._spawned is not None:
            self._spawned.close(None)
            self._spawned = None
