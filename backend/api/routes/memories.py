"""Mem0-shaped memory CRUD and search, scoped to the caller's tenant."""

from __future__ import annotations

import uuid
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
from backend.db.models import Fact, FactHistory
from backend.errors import InvalidRequestError
from backend.repositories.base import Page
from backend.repositories.encodings import EncodingRepository
from backend.repositories.memories import UserRepository
from backend.services.context import TenantContext
from backend.services.memories import MemoryService

router = APIRouter(prefix="/v1/memories", tags=["memories"], responses=error_responses(*AUTHED))
NOT_FOUND = error_responses(404)


def memory_out(
    ctx: TenantContext, fact: Fact, score: float | None = None, user_id: str | None = None
) -> MemoryOut:
    """``user_id``: the owner's external id when the caller knows it (lists and searches are per
    user, so they pass it instead of one user lookup per fact)."""
    if user_id is None:
        user = UserRepository(ctx.session, ctx.tenant).by_id(fact.user_id)
        user_id = user.external_id if user else ""
    return MemoryOut(
        id=fact.public_id,
        user_id=user_id,
        memory=fact.text,
        version=fact.version,
        metadata=fact.meta or {},
        created_at=fact.created_at,
        updated_at=fact.updated_at,
        score=score,
    )


def history_out(memory_id: uuid.UUID, entry: FactHistory) -> HistoryOut:
    return HistoryOut(
        memory_id=memory_id,
        version=entry.version,
        event=entry.event,
        old_memory=entry.old_text,
        new_memory=entry.new_text,
        created_at=entry.created_at,
    )


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
        return MemoryCreated(
            results=[memory_out(ctx, f, user_id=body.user_id) for f in facts], job_id=job
        )

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
        items=[memory_out(ctx, f, user_id=user_id) for f in facts],
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
    return SearchOut(results=[memory_out(ctx, h.fact, h.score, body.user_id) for h in hits])


@router.get("/{memory_id}", response_model=MemoryOut, responses=NOT_FOUND)
def get_memory(memory_id: MemoryIdPath, ctx: TenantContextDep) -> MemoryOut:
    return memory_out(ctx, MemoryService(ctx).get(memory_id))


@router.put("/{memory_id}", response_model=MemoryOut, responses=NOT_FOUND)
def update_memory(memory_id: MemoryIdPath, body: MemoryUpdate, ctx: TenantContextDep) -> MemoryOut:
    fact = MemoryService(ctx).update(memory_id, body.text, body.metadata)
    commit(ctx.session)
    ctx.session.refresh(fact)
    return memory_out(ctx, fact)


@router.delete("/{memory_id}", response_model=Deleted, responses=NOT_FOUND)
def delete_memory(memory_id: MemoryIdPath, ctx: TenantContextDep) -> Deleted:
    MemoryService(ctx).delete(memory_id)
    commit(ctx.session)
    return Deleted(deleted=1)


@router.get("/{memory_id}/history", response_model=list[HistoryOut], responses=NOT_FOUND)
def memory_history(memory_id: MemoryIdPath, ctx: TenantContextDep) -> list[HistoryOut]:
    return [history_out(memory_id, h) for h in MemoryService(ctx).history(memory_id)]


@router.get("/{memory_id}/encodings", response_model=list[EncodingOut], responses=NOT_FOUND)
def memory_encodings(memory_id: MemoryIdPath, ctx: TenantContextDep) -> list[EncodingOut]:
    fact = MemoryService(ctx).get(memory_id)
    return [
        EncodingOut(
            model=r.model,
            window=r.window,
            fact_version=r.fact_version,
            encoding_version=r.encoding_version,
            status=r.status,
            nbytes=r.nbytes,
        )
        for r in EncodingRepository(ctx.session, ctx.tenant).for_fact(fact.id)
    ]
