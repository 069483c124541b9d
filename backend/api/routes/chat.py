"""OpenAI-compatible chat completions (the official SDK works unchanged), with memories."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, StreamingResponse

from backend.api.deps import TenantContextDep, commit
from backend.api.metrics import CHAT_MEMORIES, CHAT_TTFT
from backend.api.schemas.chat import ChatCompletionRequest
from backend.db.session import session_scope
from backend.repositories.requests import RequestLogRepository
from backend.services.chat import ChatRequest, ChatRun, ChatService
from gpu_runtime.runtime import Mode
from gpu_runtime.types import TenantId

router = APIRouter(prefix="/v1/chat", tags=["chat"])


def _record(tenant: TenantId, run: ChatRun) -> None:
    """Written after the answer is out, in its own transaction (the request's is closed)."""
    CHAT_TTFT.labels(run.request.mode.value).observe((run.ttft_ms or 0) / 1000)
    CHAT_MEMORIES.observe(run.k)
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


def _extension(run: ChatRun) -> dict[str, Any]:
    return {
        "mode": run.request.mode.value,
        "memories": run.memories,
        "injected_tokens": run.injected_tokens,
        "ttft_ms": run.ttft_ms,
    }


@router.post("/completions", response_model=None)
def chat_completions(body: ChatCompletionRequest, ctx: TenantContextDep) -> Any:
    request = ChatRequest(
        messages=[(m.role, m.text()) for m in body.messages],
        user=body.user,
        mode=Mode(body.memory.mode),
        top_k=body.memory.top_k,
        max_tokens=body.max_completion_tokens or body.max_tokens or 128,
        temperature=body.temperature,
        top_p=body.top_p,
        seed=body.seed,
    )
    run = ChatService(ctx).start(request)
    commit(ctx.session)  # retrieval is done; the engine needs no open transaction
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    if body.stream:
        return StreamingResponse(
            _sse(run, ctx.tenant, completion_id, created, body.model),
            media_type="text/event-stream",
        )
    text = "".join(event.text for event in run.stream())
    _record(ctx.tenant, run)
    return JSONResponse(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": body.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": run.finish_reason or "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": run.prompt_tokens,
                "completion_tokens": run.completion_tokens,
                "total_tokens": run.prompt_tokens + run.completion_tokens,
            },
            "inferscale": _extension(run),
        }
    )


def _sse(
    run: ChatRun, tenant: TenantId, completion_id: str, created: int, model: str
) -> Iterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None, **extra: Any) -> str:
        body = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }
        return f"data: {json.dumps(body)}\n\n"

    yield chunk({"role": "assistant", "content": ""}, None)
    for event in run.stream():
        if event.text:
            yield chunk({"content": event.text}, None)
        if event.finished:
            usage = {
                "prompt_tokens": run.prompt_tokens,
                "completion_tokens": run.completion_tokens,
                "total_tokens": run.prompt_tokens + run.completion_tokens,
            }
            yield chunk({}, run.finish_reason or "stop", usage=usage, inferscale=_extension(run))
    yield "data: [DONE]\n\n"
    _record(tenant, run)
