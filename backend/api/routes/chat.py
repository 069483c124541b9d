"""OpenAI-compatible chat completions (the official SDK works unchanged), with memories.

Retrieval and composing run in the thread pool (database, embedding, FAISS); the answer streams
from the runtime on the event loop, so a hundred open streams hold no threads. The first event is
awaited before the response starts: what fails before any token (the runtime down, a prompt
beyond the context) is a clean HTTP error; what fails after it ends the SSE stream with an error
event, which the OpenAI SDK raises.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from backend.api import openai_compat
from backend.api.chat_stream import ChatStream, choice
from backend.api.deps import AdmissionDep, ResourcesDep
from backend.api.metrics import CHAT_MEMORIES, CHAT_TTFT, TENANT_TOKENS
from backend.api.middleware import ADMITTED, ARRIVED
from backend.api.schemas.chat import ChatCompletionRequest, inferscale_extension, usage_of
from backend.api.schemas.common import AUTHED, error_responses
from backend.db.session import commit, read_session_factory
from backend.errors import AppError
from backend.resources import Resources
from backend.services.chat import ChatRequest, ChatRun, ChatService, MemoryMode, log_request
from backend.services.rate_limits import Admission
from gpu_runtime.client import protocol as p
from gpu_runtime.client.inflight import InFlight, Tracked, tracked_of
from gpu_runtime.types import TenantId

router = APIRouter(prefix="/v1/chat", tags=["chat"], responses=error_responses(*AUTHED))
logger = logging.getLogger(__name__)


def _record(tenant: TenantId, run: ChatRun, admission: Admission) -> None:
    """Written after the answer is out, in its own transaction (the request's is closed). The
    request log is observability: failing to write it never fails the answer. The tokens count
    towards the tenant's tokens per window."""
    CHAT_TTFT.labels(run.request.mode.value).observe((run.ttft_ms or 0) / 1000)
    CHAT_MEMORIES.observe(run.k)
    TENANT_TOKENS.labels(tenant.value, "prompt").inc(run.prompt_tokens)
    TENANT_TOKENS.labels(tenant.value, "completion").inc(run.completion_tokens)
    admission.record_tokens(run.prompt_tokens + run.completion_tokens)
    try:
        log_request(tenant, run)
    except Exception:
        logger.exception("request log not written for tenant %s", tenant.value)


def _retrieve(
    resources: Resources,
    tenant: TenantId,
    request: ChatRequest,
    arrived: float | None,
    asked: str,
    tracked: Tracked | None,
) -> tuple[ChatRun, str]:
    """Retrieval and composing in one thread, in a session of its own that only reads: a
    connection is never held while the request waits for a thread (two hops held one across
    the wait; at 100 concurrent chats the pool ran dry and 5 of 200 got a 503). Also the
    served model's name for ``asked`` (a 404 if it names another model)."""
    entered = time.perf_counter()
    if tracked is not None:
        InFlight.move(tracked, "retrieval", in_thread=True)
    model = openai_compat.served_model(resources.engine, resources.settings, asked)
    with read_session_factory()() as session:
        ctx = resources.tenant_context(session, tenant)
        run = ChatService(ctx).start(request, arrived)
        committing = time.perf_counter()
        commit(session)
        run.timings_ms["commit"] = (time.perf_counter() - committing) * 1000
    run.timings_ms["auth_db_retrieval_thread"] = (entered - run.started) * 1000
    return run, model


@router.post("/completions", response_model=None, responses=error_responses(400, 404))
async def chat_completions(
    body: ChatCompletionRequest, resources: ResourcesDep, http: Request, admission: AdmissionDep
) -> Any:
    settings, tenant, engine = resources.settings, admission.tenant, resources.engine
    openai_compat.refuse_unsupported(body)
    recompute = body.memory.recompute
    budget = body.memory.recompute_tokens
    gpu_budget = None
    if budget is None and recompute is None:
        budget = settings.hybrid_recompute_tokens
        if budget is None:  # the runtime's device decides (ChatService.start)
            gpu_budget = settings.hybrid_recompute_tokens_gpu or None
    top_k, gpu_top_k = body.memory.top_k, None
    if top_k is None:  # the server's default, the GPU's where the runtime serves on one
        top_k, gpu_top_k = settings.chat_top_k, settings.chat_top_k_gpu or None
    request = ChatRequest(
        messages=[(m.role, m.text()) for m in body.messages],
        user=body.user,
        mode=MemoryMode(body.memory.mode),
        top_k=top_k,
        gpu_top_k=gpu_top_k,
        recompute=settings.hybrid_recompute if recompute is None else recompute,
        recompute_tokens=budget,
        gpu_recompute_tokens=gpu_budget,
        weight=admission.weight,
        max_tokens_given=(body.max_completion_tokens or body.max_tokens) is not None,
        sampling=openai_compat.sampling(body),
    )
    state = http.scope.get("state", {})
    arrived = state.get(ARRIVED)
    tracked = tracked_of(http.scope)
    run, model = await run_in_threadpool(
        _retrieve, resources, tenant, request, arrived, body.model, tracked
    )
    if tracked is not None:
        InFlight.move(tracked, "first_token")
        run.request_id = tracked.request_id
    if arrived is not None and ADMITTED in state:  # where the auth_db lap went
        admission_started, admitted = state[ADMITTED]
        run.timings_ms["auth_db_admitted"] = (admitted - arrived) * 1000
        run.timings_ms["auth_db_admission_own"] = (admitted - admission_started) * 1000
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    events = run.stream()
    first = await anext(events)  # errors before the first token are HTTP errors
    stream = ChatStream(completion_id, created, model, body)
    if body.stream:
        sse = _sse(run, first, events, tenant, stream, admission, tracked)
        if tracked is not None:
            tracked.body = sse
        return StreamingResponse(sse, media_type="text/event-stream")
    if tracked is not None:
        InFlight.move(tracked, "generating")
    received = [first, *[event async for event in events]]
    text = "".join(event.text for event in received)
    await run_in_threadpool(_record, tenant, run, admission)
    return JSONResponse(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": run.finish_reason or "stop",
                    "logprobs": stream.logprobs(engine, received),
                }
            ],
            "usage": usage_of(run),
            "inferscale": inferscale_extension(run),
        }
    )


async def _sse(
    run: ChatRun,
    first: p.GenerateEvent,
    rest: AsyncIterator[p.GenerateEvent],
    tenant: TenantId,
    stream: ChatStream,
    admission: Admission,
    tracked: Tracked | None = None,
) -> AsyncIterator[str]:
    """One write per event the runtime client hands over (a burst of tokens when the API lags
    behind, docs/benchmarks.md): every write is a syscall, and a write per token was the API's
    largest CPU cost at 100 streams. The role chunk rides with the first token, the finish and
    usage chunks and ``[DONE]`` with the last; the SSE events are the same as one per write."""

    parts = [stream.chunk([choice({"role": "assistant", "content": ""}, None)])]
    event: p.GenerateEvent | None = first
    if tracked is not None:
        InFlight.move(tracked, "streaming")  # this task's (the response's own)
    try:
        while event is not None:
            if tracked is not None:
                tracked.touch()
            if event.text or (stream.want_logprobs and event.token_ids):
                logprobs = stream.logprobs(run.engine, [event])
                if logprobs is None:  # the common case, from a template
                    parts.append(stream.content_chunk(event.text))
                else:
                    parts.append(stream.chunk([choice({"content": event.text}, None, logprobs)]))
            if event.event == "done":
                extra: dict[str, Any] = {"inferscale": inferscale_extension(run)}
                if not stream.usage_chunk:
                    extra["usage"] = usage_of(run)
                parts.append(stream.chunk([choice({}, run.finish_reason or "stop")], **extra))
                if stream.usage_chunk:  # OpenAI's stream_options.include_usage: a last chunk
                    parts.append(stream.chunk([], usage=usage_of(run)))
                parts.append("data: [DONE]\n\n")
            if parts:
                yield "".join(parts)
                parts = []
            event = await anext(rest, None)
    except AppError as exc:  # the OpenAI SDK raises on a data line that carries "error"
        error = {"message": exc.message, "type": exc.code, "code": exc.code}
        yield "".join(parts) + f"data: {json.dumps({'error': error})}\n\n"
        return
    await run_in_threadpool(_record, tenant, run, admission)
