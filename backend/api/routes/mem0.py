"""Mem0's platform API, exactly as the official ``mem0ai`` SDK calls it (paths with their
trailing slashes, ``Authorization: Token <key>``), on the tenant's memories: a team on Mem0
switches by changing ``host=``. Errors carry Mem0's ``detail`` beside ours, which the SDK puts in
its exceptions (404 ``MemoryNotFoundError``, 401 ``AuthenticationError``, 400/422
``ValidationError``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from backend.api.deps import TenantContextDep, commit
from backend.api.errors import error_body, validation_message
from backend.api.schemas import mem0 as s
from backend.api.schemas.common import AUTHED, error_responses
from backend.api.schemas.text import MemoryIdPath, Text
from backend.errors import AppError, BadRequestError, InvalidRequestError, NotFoundError
from backend.repositories.jobs import JobRepository
from backend.repositories.scoped import ScopedFactRepository
from backend.services.mem0 import Mem0Service, parse_memory_id, scope_of

QUEUED = "Memory processing has been queued for background execution"


class Mem0Route(APIRoute):
    """Errors of these routes also carry ``detail``: the message Mem0's SDK reads."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except AppError as exc:
                body: dict[str, Any] = error_body(exc.code, exc.message, exc.param)
                return JSONResponse(
                    {**body, "detail": exc.message}, exc.status_code, headers=exc.headers
                )
            except RequestValidationError as exc:
                message = validation_message(exc)
                body = error_body("invalid_request", message)
                return JSONResponse({**body, "detail": message}, 422)

        return route


router = APIRouter(tags=["mem0"], route_class=Mem0Route,
                   responses=error_responses(*AUTHED, 400))  # fmt: skip
NOT_FOUND = error_responses(404)


def _page_url(request: Request, page: int, size: int) -> str:
    return str(request.url.include_query_params(page=page, page_size=size))


# ---- the SDK's constructor -----------------------------------------------------------------
@router.get("/v1/ping/", response_model=s.Ping)
def ping(ctx: TenantContextDep) -> s.Ping:
    """Mem0's SDKs call this on construction: the key is valid; the tenant is the org/project."""
    tenant = ctx.tenant.value
    return s.Ping(status="ok", message="API key is valid", org_id=tenant, project_id=tenant,
                  user_email=None)  # fmt: skip


# ---- memories ------------------------------------------------------------------------------
@router.post("/v3/memories/add/", response_model=s.AddOut)
def add(body: s.AddRequest, ctx: TenantContextDep) -> s.AddOut:
    entities = {"user_id": body.user_id, "agent_id": body.agent_id, "app_id": body.app_id,
                "run_id": body.run_id}  # fmt: skip
    scope = scope_of(entities, body.filters)
    service = Mem0Service(ctx)
    messages = [m for m in body.messages if m.role != "system" and m.content.strip()]
    if not messages:
        raise InvalidRequestError("nothing to remember: no user or assistant message content")
    if not body.infer:
        facts = service.add_verbatim(scope, [m.content.strip() for m in messages], body.metadata)
        encoding = service.memories.last_job_id
        commit(ctx.session)
        added = [s.AddedMemory(id=str(f.public_id), event="ADD", data={"memory": f.text})
                 for f in facts]  # fmt: skip
        return s.AddOut(results=added, event_id=str(encoding) if encoding else None,
                        status="SUCCEEDED",
                        message="Memories stored as given (infer=false)")  # fmt: skip
    request = {
        "messages": [m.model_dump(exclude_none=True) for m in body.messages],
        "metadata": body.metadata or {},
        "custom_instructions": body.custom_instructions,
        "agent_custom_instructions": body.agent_custom_instructions,
        "includes": body.includes,
        "excludes": body.excludes,
        "custom_categories": [name for c in body.custom_categories or [] for name in c],
    }
    job = service.schedule_inference(scope, request)
    commit(ctx.session)
    return s.AddOut(results=[], event_id=str(job.id), status="PENDING", message=QUEUED)


@router.post("/v3/memories/", response_model=s.MemoryPage)
def get_all(
    body: s.ListRequest,
    ctx: TenantContextDep,
    request: Request,
    page: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    page_size: Annotated[int | None, Query(ge=1, le=1000)] = None,
) -> s.MemoryPage:
    number, size = page or body.page or 1, page_size or body.page_size or 100
    found, total = Mem0Service(ctx).page(body.filters, number, size)
    commit(ctx.session)
    later = number * size < total
    return s.MemoryPage(
        count=total,
        next=_page_url(request, number + 1, size) if later else None,
        previous=_page_url(request, number - 1, size) if number > 1 else None,
        results=[s.Mem0Memory.of(owned) for owned in found],
    )


@router.post("/v3/memories/search/", response_model=s.SearchOut)
def search(body: s.SearchRequest, ctx: TenantContextDep) -> s.SearchOut:
    hits = Mem0Service(ctx).search(body.query, body.filters, body.top_k, body.threshold)
    commit(ctx.session)
    return s.SearchOut(results=[s.Mem0Hit.scored(owned, score) for owned, score in hits])


@router.get("/v1/memories/{memory_id}/", response_model=s.Mem0Memory, responses=NOT_FOUND)
def get_memory(memory_id: MemoryIdPath, ctx: TenantContextDep) -> s.Mem0Memory:
    return s.Mem0Memory.of(Mem0Service(ctx).get(memory_id))


@router.put("/v1/memories/{memory_id}/", response_model=s.Mem0Memory, responses=NOT_FOUND)
def update_memory(
    memory_id: MemoryIdPath, body: s.UpdateRequest, ctx: TenantContextDep
) -> s.Mem0Memory:
    service = Mem0Service(ctx)
    service.update(memory_id, body.text, body.metadata)
    commit(ctx.session)
    return s.Mem0Memory.of(service.get(memory_id))


@router.delete("/v1/memories/{memory_id}/", response_model=s.Message, responses=NOT_FOUND)
def delete_memory(memory_id: MemoryIdPath, ctx: TenantContextDep) -> s.Message:
    Mem0Service(ctx).memories.delete(memory_id)
    commit(ctx.session)
    return s.Message(message="Memory deleted successfully!")


@router.get("/v1/memories/{memory_id}/history/", response_model=list[s.HistoryEntry],
            responses=NOT_FOUND)  # fmt: skip
def memory_history(memory_id: MemoryIdPath, ctx: TenantContextDep) -> list[s.HistoryEntry]:
    fact, owner, entries = Mem0Service(ctx).history(memory_id)
    return [s.HistoryEntry.of(fact, owner, h) for h in entries]


EntityQuery = Annotated[Text | None, Query(min_length=1, max_length=200)]


@router.delete("/v1/memories/", response_model=s.Message)
def delete_all(
    ctx: TenantContextDep,
    user_id: EntityQuery = None,
    agent_id: EntityQuery = None,
    app_id: EntityQuery = None,
    run_id: EntityQuery = None,
) -> s.Message:
    """Every memory of the entities given (``*``: any); at least one must be given."""
    given = {"user_id": user_id, "agent_id": agent_id, "app_id": app_id, "run_id": run_id}
    filters = {k: v for k, v in given.items() if v is not None}
    if not filters:
        raise BadRequestError("give at least one of user_id, agent_id, app_id or run_id ('*': any)")
    deleted = Mem0Service(ctx).delete_matching(filters)
    commit(ctx.session)
    return s.Message(message=f"Memories deleted successfully! ({deleted})")


# ---- entities ------------------------------------------------------------------------------
@router.get("/v1/entities/", response_model=s.EntityPage)
def entities(ctx: TenantContextDep) -> s.EntityPage:
    found = ScopedFactRepository(ctx.session, ctx.tenant).entities()
    commit(ctx.session)
    results = [
        s.EntityOut(id=e.name, name=e.name, type=e.type, owner=ctx.tenant.value, metadata=None,
                    total_memories=e.memories, created_at=e.created_at, updated_at=e.updated_at)
        for e in found
    ]  # fmt: skip
    totals = {kind: sum(1 for e in found if e.type == kind) for kind in s.ENTITY_TYPES}
    return s.EntityPage(count=len(results), next=None, previous=None, results=results,
                        total_users=totals["user"], total_agents=totals["agent"],
                        total_apps=totals["app"], total_runs=totals["run"])  # fmt: skip


@router.delete("/v2/entities/{entity_type}/{entity_id}/", response_model=s.Message)
def delete_entity(
    entity_type: s.EntityType,
    entity_id: Annotated[Text, Path(min_length=1, max_length=200)],
    ctx: TenantContextDep,
) -> s.Message:
    """The entity's memories, its pending ``infer=true`` jobs and (a user) its conversations
    (idempotent: an entity with nothing left is fine)."""
    Mem0Service(ctx).delete_entity(entity_type, entity_id)
    commit(ctx.session)
    return s.Message(message="Entity deleted successfully.")


# ---- batches -------------------------------------------------------------------------------
@router.put("/v1/batch/", response_model=s.Message, responses=NOT_FOUND)
def batch_update(body: s.BatchUpdateRequest, ctx: TenantContextDep) -> s.Message:
    """All or nothing: any memory not found is a 404 and none is changed."""
    items = [(parse_memory_id(m.memory_id), m.text, m.metadata) for m in body.memories]
    count = Mem0Service(ctx).batch_update(items)
    commit(ctx.session)
    return s.Message(message=f"Successfully updated {count} memories")


@router.delete("/v1/batch/", response_model=s.Message, responses=NOT_FOUND)
def batch_delete(body: s.BatchDeleteRequest, ctx: TenantContextDep) -> s.Message:
    """All or nothing: any memory not found is a 404 and none is deleted."""
    ids = [parse_memory_id(m.memory_id) for m in body.memories]
    count = Mem0Service(ctx).batch_delete(ids)
    commit(ctx.session)
    return s.Message(message=f"Successfully deleted {count} memories")


# ---- events (infer=true jobs) --------------------------------------------------------------
@router.get("/v1/event/{event_id}/", response_model=s.EventOut, responses=NOT_FOUND)
def event(event_id: uuid.UUID, ctx: TenantContextDep) -> s.EventOut:
    job = JobRepository(ctx.session, uuid.UUID(ctx.tenant.value)).get(event_id)
    if job is None:
        raise NotFoundError(f"event {event_id} not found")
    return s.EventOut.of(job)
