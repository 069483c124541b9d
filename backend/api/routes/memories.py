"""Mem0-shaped memory CRUD and search, scoped to the caller's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from backend.api.deps import IdempotencyKeyDep, TenantContextDep, commit
from backend.api.idempotency import run_idempotent
from backend.api.schemas.common import AUTHED, PageOut, error_responses
from backend.api.schemas.memories import (
    Deleted,
    EncodingOut,
    HistoryOut,
    MemoryCreate,
    MemoryCreated,
    MemoryOut,
    MemoryUpdate,
    SearchOut,
    SearchRequest,
)
from backend.api.schemas.text import MemoryIdPath, OffsetQuery, UserIdQuery
from backend.errors import InvalidRequestError
from backend.repositories.base import Page
from backend.services.memories import MemoryService

router = APIRouter(prefix="/v1/memories", tags=["memories"], responses=error_responses(*AUTHED))
NOT_FOUND = error_responses(404)


@router.post("", status_code=201, response_model=MemoryCreated, responses=error_responses(409))
def add_memories(
    body: MemoryCreate, ctx: TenantContextDep, idempotency_key: IdempotencyKeyDep = None
) -> JSONResponse:
    texts = [t for t in body.texts() if t]
    if not texts:
        raise InvalidRequestError("nothing to remember: no user or assistant message content")

    def action() -> MemoryCreated:
        service = MemoryService(ctx)
        facts = service.add(body.user_id, texts, body.metadata)
        ctx.session.flush()
        for fact in facts:
            ctx.session.refresh(fact)
        job = service.last_job_id
        return MemoryCreated(results=[MemoryOut.of(f, body.user_id) for f in facts], job_id=job)

    return run_idempotent(ctx.session, ctx.tenant.value, idempotency_key, body, action)


@router.get("", response_model=PageOut[MemoryOut])
def list_memories(
    user_id: UserIdQuery,
    ctx: TenantContextDep,
    offset: OffsetQuery = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[MemoryOut]:
    facts, total = MemoryService(ctx).list_for(user_id, Page(offset, limit))
    return PageOut(
        items=[MemoryOut.of(f, user_id) for f in facts],
        total=total,
        offset=offset,
        limit=limit,
    )


@router.delete("", response_model=Deleted)
def delete_user_memories(user_id: UserIdQuery, ctx: TenantContextDep) -> Deleted:
    count = MemoryService(ctx).delete_all(user_id)
    commit(ctx.session)
    return Deleted(deleted=count)


@router.post("/search", response_model=SearchOut)
def search_memories(body: SearchRequest, ctx: TenantContextDep) -> SearchOut:
    hits = MemoryService(ctx).search(body.user_id, body.query, body.top_k)
    commit(ctx.session)  # an index rebuild reads only; nothing to keep, but end cleanly
    return SearchOut(results=[MemoryOut.of(h.fact, body.user_id, h.score) for h in hits])


@router.get("/{memory_id}", response_model=MemoryOut, responses=NOT_FOUND)
def get_memory(memory_id: MemoryIdPath, ctx: TenantContextDep) -> MemoryOut:
    service = MemoryService(ctx)
    fact = service.get(memory_id)
    return MemoryOut.of(fact, service.owner_id(fact))


@router.put("/{memory_id}", response_model=MemoryOut, responses=NOT_FOUND)
def update_memory(memory_id: MemoryIdPath, body: MemoryUpdate, ctx: TenantContextDep) -> MemoryOut:
    service = MemoryService(ctx)
    fact = service.update(memory_id, body.text, body.metadata)
    commit(ctx.session)
    ctx.session.refresh(fact)
    return MemoryOut.of(fact, service.owner_id(fact))


@router.delete("/{memory_id}", response_model=Deleted, responses=NOT_FOUND)
def delete_memory(memory_id: MemoryIdPath, ctx: TenantContextDep) -> Deleted:
    MemoryService(ctx).delete(memory_id)
    commit(ctx.session)
    return Deleted(deleted=1)


@router.get("/{memory_id}/history", response_model=list[HistoryOut], responses=NOT_FOUND)
def memory_history(memory_id: MemoryIdPath, ctx: TenantContextDep) -> list[HistoryOut]:
    return [HistoryOut.of(memory_id, h) for h in MemoryService(ctx).history(memory_id)]


@router.get("/{memory_id}/encodings", response_model=list[EncodingOut], responses=NOT_FOUND)
def memory_encodings(memory_id: MemoryIdPath, ctx: TenantContextDep) -> list[EncodingOut]:
    return [EncodingOut.of(r) for r in MemoryService(ctx).encodings_of(memory_id)]
