"""The stack a team would deploy instead of InferScale, measured like the platform (same users, k,
questions and facts, in the same run): the official Mem0 open-source library (``mem0ai``'s
``Memory``: the same MiniLM embedder, a local FAISS store, the user's facts added with
``infer=False``) retrieves the k facts in the app's process, and vLLM's own OpenAI server answers
with them in the prompt (the words the platform's prompt mode uses: its system prompt, facts
header and one ``- fact`` line each), streamed through the official OpenAI SDK (``chats.py``).

Parts of the client's TTFT, as for the platform: ``search`` (Mem0's query embedding and vector
search, in the app's process), ``compose`` (the messages), and ``server`` (request sent to
vLLM's server -> first content token: its HTTP hop, queueing, prefill)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench.serve.chats import (
    BENCH_USER,
    FIRST_CELL_QUESTION,
    Workload,
    cell_questions,
    open_memory,
    peer_chat,
    run_users,
    sdks_for,
)
from bench.serve.clients import ClientProcesses
from bench.serve.host_cpu import CpuMeter
from bench.serve.serve import Cell, measure_cell, summarize

PEER_PARTS = ("search", "compose", "server")


class PeerBench:
    def __init__(
        self, server: str, model: str, max_tokens: int = 16, cpu: CpuMeter | None = None,
        clients: ClientProcesses | None = None,
    ) -> None:  # fmt: skip
        self.server = server.rstrip("/")
        self.cpu = cpu or CpuMeter()
        self.clients = clients  # users spread over client processes (cells of 2+ users)
        self.model = model
        self.max_tokens = max_tokens
        self.memory: Any = None
        self.store: Path | None = None  # Mem0's folder: each client process opens its own
        self.questions: list[str] = []

    def prepare(self, facts: list[str], questions: list[str], log: Any = print) -> None:
        """The platform user's facts, added to Mem0 as given."""
        self.store = Path(tempfile.mkdtemp(prefix="inferscale-peer-"))
        self.memory = open_memory(self.store)
        started = time.perf_counter()
        for fact in facts:
            self.memory.add(fact, user_id=BENCH_USER, infer=False)
        self.questions = questions
        log(f"peer: {len(facts)} facts added to Mem0 in {time.perf_counter() - started:.1f} s")

    def workload(self, k: int, per_user: int, first: int = 0) -> Workload:
        store = str(self.store) if self.store is not None else None
        return Workload(
            self.server, (), tuple(self.questions), self.max_tokens, "peer", k, per_user,
            self.model, store, first,
        )  # fmt: skip

    async def run(
        self, users: list[int], ks: list[int], per_user: int,
        first_question: int = FIRST_CELL_QUESTION,
    ) -> list[Cell]:  # fmt: skip
        sdk = sdks_for(self.workload(0, per_user))[0]
        firsts = cell_questions(users, ks, per_user, first_question)  # as the platform's cells
        try:
            await peer_chat(sdk, self.memory, self.workload(10, 1), 0)  # warm-up
            return [
                await self._cell(sdk, n, k, per_user, firsts[(n, k)]) for n in users for k in ks
            ]
        finally:
            await sdk.close()
            if self.clients is not None:
                self.clients.close()

    async def _cell(self, sdk: Any, n: int, k: int, per_user: int, first: int) -> Cell:
        cell = Cell(n, k, "peer")
        workload = self.workload(k, per_user, first)
        clients = self.clients if n > 1 else None
        await measure_cell(
            cell, self.cpu, workload,
            lambda: run_users(workload, list(range(n)), [sdk], self.memory), None, clients,
        )  # fmt: skip
        ttft = summarize([s.client_ttft_ms for s in cell.samples])
        print(
            f"peer  users={n:<3} k={k:<3} client TTFT p50 {ttft['median']:.1f} ms, "
            f"{len(cell.samples) / cell.seconds:.2f} req/s, {cell.failures} failed",
            flush=True,
        )
        return cell
