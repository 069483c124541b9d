"""Chat: retrieve the user's top-k memories, compose, run on the engine, time it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from backend.errors import InvalidRequestError
from backend.services.context import TenantContext
from backend.services.memories import MemoryService, fact_key
from gpu_runtime.composer import FactText
from gpu_runtime.runtime import Mode, StreamEvent


@dataclass(frozen=True)
class ChatRequest:
    messages: list[tuple[str, str]]  # (role, content), the last one the user's query
    user: str | None
    mode: Mode = Mode.KV
    top_k: int = 5
    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None


@dataclass
class ChatRun:
    """One chat's stream plus what it measured (filled while the stream is consumed)."""

    request: ChatRequest
    events: Iterator[StreamEvent]
    k: int
    started: float
    ttft_ms: float | None = None
    total_ms: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    injected_tokens: int = 0
    finish_reason: str | None = None
    memories: list[int] = field(default_factory=list)

    def stream(self) -> Iterator[StreamEvent]:
        for event in self.events:
            now = time.perf_counter()
            if self.ttft_ms is None:
                self.ttft_ms = (now - self.started) * 1000
            self.completion_tokens += len(event.token_ids)
            self.prompt_tokens = event.prompt_tokens
            self.injected_tokens = event.num_cached_tokens
            if event.finished:
                self.finish_reason = event.finish_reason
                self.total_ms = (now - self.started) * 1000
            yield event


def split_messages(
    messages: list[tuple[str, str]],
) -> tuple[str | None, list[tuple[str, str]], str]:
    """(system prompt, history, query): the last message must be the user's."""
    if not messages or messages[-1][0] != "user":
        raise InvalidRequestError("the last message must have role 'user'")
    system = "\n".join(c for r, c in messages if r in ("system", "developer")) or None
    history = [(r, c) for r, c in messages[:-1] if r in ("user", "assistant")]
    return system, history, messages[-1][1]


class ChatService:
    def __init__(self, ctx: TenantContext) -> None:
        self.ctx = ctx

    def start(self, request: ChatRequest) -> ChatRun:
        started = time.perf_counter()
        system, history, query = split_messages(request.messages)
        facts: list[FactText] = []
        memories: list[int] = []
        if request.mode is not Mode.NONE and request.user and request.top_k > 0:
            config = self.ctx.engine.encoding_config()
            hits = MemoryService(self.ctx).search(request.user, query, request.top_k)
            for hit in hits:
                key = fact_key(self.ctx, hit.fact.id, hit.fact.version, config)
                facts.append(FactText(key, hit.fact.text))
                memories.append(hit.fact.id)
        prompt = self.ctx.engine.compose(self.ctx.tenant, facts, query, history, system)
        mode = Mode.PROMPT if request.mode is Mode.NONE else request.mode
        events = self.ctx.engine.stream(
            self.ctx.tenant,
            prompt,
            mode,
            max_tokens=request.max_tokens,
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
        )
        return ChatRun(request, events, len(facts), started, memories=memories)
