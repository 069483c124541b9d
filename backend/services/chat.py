"""Chat: retrieve the user's top-k memories, hint the runtime, compose, stream, time it.

Every chat records where its time to first token went (``ChatRun.timings_ms``): from the
request's arrival, authentication and the database (``auth_db``), the query's embedding
(``embed``: what of it the user's lookup, run meanwhile, did not hide), the user's lookup,
the index search and the fact rows (``search``), composing (``compose``), the
transaction's end (``commit``), then the runtime, which reports its own share (``engine_ttft``);
the rest of the client's TTFT is the HTTP hops.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from backend.db.session import session_scope
from backend.errors import ContextLengthError, InvalidRequestError
from backend.repositories.requests import RequestLogRepository
from backend.runtime.client import EngineClient
from backend.services.context import TenantContext
from backend.services.memories import MemoryService, fact_key
from backend.services.query_embedding import EmbeddedOn
from backend.services.timing import Splits, Stopwatch
from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import ComposedPrompt, FactText, hybrid_injected
from gpu_runtime.types import TenantId


class MemoryMode(enum.StrEnum):
    KV = "kv"  # retrieved facts injected as stored KV
    HYBRID = "hybrid"  # the least relevant injected, the ``recompute`` most relevant prefilled
    PROMPT = "prompt"  # retrieved facts pasted into the prompt (Mem0-style)
    NONE = "none"  # no memories


@dataclass(frozen=True)
class ChatRequest:
    messages: list[tuple[str, str]]  # (role, content), the last one the user's query
    user: str | None
    mode: MemoryMode = MemoryMode.KV
    top_k: int = 5
    gpu_top_k: int | None = None  # top_k instead when the runtime is on a GPU (the chat chose none)
    recompute: int = 0  # hybrid mode: how many of the most relevant facts are prefilled as text
    recompute_tokens: int | None = None  # hybrid mode: instead, a budget in tokens for them
    gpu_recompute_tokens: int | None = None  # the budget instead when the runtime is on a GPU
    sampling: p.SamplingModel = field(default_factory=p.SamplingModel)
    max_tokens_given: bool = True  # else sampling.max_tokens is a default, cut to the room left
    weight: float = 1.0  # the tenant's share of the engine (the runtime's fair gate)


@dataclass
class ChatRun:
    """One chat's composed prompt and, once streamed, what it measured."""

    request: ChatRequest
    engine: EngineClient
    prompt: ComposedPrompt
    tenant: TenantId
    k: int
    started: float  # the request's arrival (time.perf_counter())
    memories: list[str] = field(default_factory=list)  # public ids of the facts served
    timings_ms: dict[str, float] = field(default_factory=dict)
    query_embedded_on: EmbeddedOn | None = None  # None: no search (no memories asked for)
    ttft_ms: float | None = None
    total_ms: float | None = None
    engine_ttft_ms: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    injected_tokens: int = 0
    cached_tokens: int = 0
    finish_reason: str | None = None
    request_id: str | None = None  # the API's id of the request, carried to the runtime

    @property
    def engine_mode(self) -> str:
        return "kv" if self.request.mode in INJECTING else "prompt"

    async def stream(self) -> AsyncIterator[p.GenerateEvent]:
        events = self.engine.stream(
            self.tenant, self.prompt, self.engine_mode, self.request.sampling,
            self.request.weight, self.request_id,
        )  # fmt: skip
        sent = time.perf_counter()
        async for event in events:
            now = time.perf_counter()
            if self.ttft_ms is None and event.token_ids:
                self.ttft_ms = (now - self.started) * 1000
                self.timings_ms["runtime_first_token"] = (now - sent) * 1000
            self.completion_tokens += len(event.token_ids)
            if event.event == "done":
                usage = event.usage
                if usage is not None:
                    self.prompt_tokens = usage.prompt_tokens
                    self.completion_tokens = usage.completion_tokens
                    self.injected_tokens = usage.injected_tokens
                    self.cached_tokens = usage.cached_tokens
                self.engine_ttft_ms = event.engine_ttft_ms
                if event.engine_ttft_ms is not None:
                    self.timings_ms["engine_ttft"] = event.engine_ttft_ms
                self.finish_reason = event.finish_reason
                self.total_ms = (now - self.started) * 1000
                if self.ttft_ms is None:
                    self.ttft_ms = self.total_ms
            yield event


INJECTING = (MemoryMode.KV, MemoryMode.HYBRID)


def injected_count(request: ChatRequest, lengths: list[int]) -> int:
    """How many of the facts (their token lengths, least to most relevant) are injected as KV:
    all in kv mode; in hybrid mode all but the ``recompute`` most relevant, or but the most
    relevant that fit ``recompute_tokens`` together."""
    k = len(lengths)
    if request.mode is MemoryMode.KV:
        return k
    if request.mode is not MemoryMode.HYBRID:
        return 0
    return hybrid_injected(lengths, request.recompute, request.recompute_tokens)


def for_device(request: ChatRequest, on_gpu: bool) -> ChatRequest:
    """The request with the GPU's defaults, when the runtime serves on a GPU: its budget in
    place of the count and its top_k, each where the chat chose none (the route leaves
    ``gpu_recompute_tokens`` and ``gpu_top_k`` unset where it did)."""
    if not on_gpu:
        return request
    if request.gpu_recompute_tokens:
        request = dataclasses.replace(request, recompute_tokens=request.gpu_recompute_tokens)
    if request.gpu_top_k:
        request = dataclasses.replace(request, top_k=request.gpu_top_k)
    return request


def split_messages(
    messages: list[tuple[str, str]],
) -> tuple[str | None, list[tuple[str, str]], str]:
    """(system prompt, history, query): the last message must be the user's."""
    if not messages or messages[-1][0] != "user":
        raise InvalidRequestError("the last message must have role 'user'")
    system = "\n".join(c for r, c in messages if r in ("system", "developer")) or None
    history = [(r, c) for r, c in messages[:-1] if r in ("user", "assistant")]
    return system, history, messages[-1][1]


def fit_context(request: ChatRequest, prompt_tokens: int, context: int) -> ChatRequest:
    """The request, its default ``max_tokens`` cut to what the context leaves; or a 400 before
    the engine sees a prompt that cannot fit (memories included: kv facts take positions too)."""
    room = context - prompt_tokens
    wanted = request.sampling.max_tokens
    if room < 1 or (request.max_tokens_given and wanted > room):
        raise ContextLengthError(
            f"the prompt is {prompt_tokens} tokens (memories included) and {wanted} more were "
            f"asked for; the model's context is {context} tokens. Shorten the messages, ask for "
            "fewer memories (memory.top_k) or fewer tokens (max_tokens)."
        )
    if wanted <= room:
        return request
    return dataclasses.replace(
        request, sampling=request.sampling.model_copy(update={"max_tokens": room})
    )


class ChatService:
    def __init__(self, ctx: TenantContext) -> None:
        self.ctx = ctx

    def start(self, request: ChatRequest, arrived: float | None = None) -> ChatRun:
        """Retrieval and composing (blocking: database, embedding, FAISS). ``arrived``: when
        the request reached the API (``time.perf_counter()``), else now."""
        clock = Stopwatch(arrived)
        clock.lap("auth_db")
        system, history, query = split_messages(request.messages)
        engine = self.ctx.engine
        config = engine.encoding_config()
        request = for_device(request, on_gpu=engine.serves_on_gpu())
        facts: list[FactText] = []
        memories: list[str] = []
        embedded_on: EmbeddedOn | None = None
        if request.mode is not MemoryMode.NONE and request.user and request.top_k > 0:
            pending = self.ctx.queries.submit_located(self.ctx.tenant, query)

            def vector() -> npt.NDArray[np.float32]:
                nonlocal embedded_on
                clock.lap("search")  # the user's index made ready while the query is embedded
                embedded, embedded_on = pending.result()
                clock.lap("embed")  # what of the embedding the lookups did not hide
                return embedded

            splits = Splits()
            hits = MemoryService(self.ctx, splits).briefs_when_ready(
                request.user, vector, request.top_k, query
            )
            with splits.timed("keys"):
                for hit in hits:
                    key = fact_key(self.ctx.tenant, hit.fact, config)
                    facts.append(FactText(key, hit.fact.text))
                    memories.append(str(hit.fact.public_id))
            clock.lap("search")
            # Where the search lap went (reported beside the laps, not in their sum).
            clock.laps.update({f"search_{name}": ms for name, ms in splits.ms.items()})
        # Least to most relevant, in every mode: the most relevant sit nearest the query, and in
        # hybrid mode they are the ones prefilled after the injected rest.
        facts.reverse()  # (``memories``, the response's list, stays best first)
        composer = engine.composer()
        lengths = [composer.fact_length(self.ctx.tenant, f.text) for f in facts]
        injected = injected_count(request, lengths)
        if injected and request.mode in INJECTING:
            # Host-tier facts start moving to the GPU tier while we compose and send, and the
            # runtime pins them and the preamble ahead of the request's load.
            preamble = composer.preamble_key(self.ctx.tenant, config, system)
            engine.prefetch(self.ctx.tenant, [preamble, *(f.key for f in facts[:injected])])
        prompt = composer.compose(
            self.ctx.tenant, config, facts, history, query, system, injected=injected
        )
        request = fit_context(request, len(prompt.token_ids), engine.model().max_model_len)
        clock.lap("compose")
        return ChatRun(
            request, engine, prompt, self.ctx.tenant, len(facts), clock.started, memories,
            clock.laps, query_embedded_on=embedded_on,
        )  # fmt: skip


def log_request(tenant: TenantId, run: ChatRun) -> None:
    """The request log's row for a finished chat, in its own transaction (the request's is
    closed by the time the answer is out)."""
    with session_scope() as session:
        RequestLogRepository(session, tenant).record(
            user_external_id=run.request.user or "",
            k=run.k,
            mode=run.request.mode.value,
            injected_tokens=run.injected_tokens,
            ttft_ms=run.ttft_ms or 0.0,
            total_ms=run.total_ms or 0.0,
            prompt_tokens=run.prompt_tokens,
            completion_tokens=run.completion_tokens,
        )
