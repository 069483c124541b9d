"""The memory browser's API (admin key): one tenant's users and memories, searched, read,
edited and deleted by an operator, through the same services as the tenant's own key. A delete
answers where the memory's KV is afterwards (on no tier: purged everywhere)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from backend.api.deps import AdminTenantContextDep, commit
from backend.api.schemas.common import AUTHED, PageOut, error_responses
from backend.api.schemas.memories import HistoryOut, MemoryOut, MemoryUpdate
from backend.api.schemas.text import MemoryIdPath, OffsetQuery, Text, UserIdQuery
from backend.repositories.base import Page
from backend.repositories.memories import UserRepository
from backend.repositories.scoped import SCOPE_OWNER
from backend.services.memories import MemoryService, fact_key

router = APIRouter(prefix="/v1/admin/tenants/{tenant_id}", tags=["admin"],
                   responses=error_responses(*AUTHED, 404))  # fmt: skip


@router.get("/users")
def users(ctx: AdminTenantContextDep) -> dict[str, Any]:
    """The tenant's users with their memory counts; ``scoped`` marks the reserved owner of
    memories added through Mem0's surface with an agent, app or run id but no user id."""
    rows = UserRepository(ctx.session, ctx.tenant).with_fact_counts()
    return {"users": [{"user_id": u, "memories": n, "scoped": u == SCOPE_OWNER} for u, n in rows]}


@router.get("/memories", response_model=PageOut[MemoryOut])
def memories(
    ctx: AdminTenantContextDep,
    user_id: UserIdQuery,
    query: Annotated[Text | None, Query(max_length=5_000)] = None,
    offset: OffsetQuery = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[MemoryOut]:
    """A user's memories, or the best matches of ``query`` among them."""
    service = MemoryService(ctx)
    if query:
        hits = service.search(user_id, query, limit)
        items = [MemoryOut.of(h.fact, user_id, h.score) for h in hits]
        return PageOut(items=items, total=len(items), offset=0, limit=limit)
    facts, total = service.list_for(user_id, Page(offset, limit))
    items = [MemoryOut.of(f, user_id) for f in facts]
    return PageOut(items=items, total=total, offset=offset, limit=limit)


@router.get("/memories/{memory_id}/history", response_model=list[HistoryOut])
def history(ctx: AdminTenantContextDep, memory_id: MemoryIdPath) -> list[HistoryOut]:
    return [HistoryOut.of(memory_id, h) for h in MemoryService(ctx).history(memory_id)]


@router.put("/memories/{memory_id}", response_model=MemoryOut)
def update(ctx: AdminTenantContextDep, memory_id: MemoryIdPath, body: MemoryUpdate) -> MemoryOut:
    service = MemoryService(ctx)
    fact = service.update(memory_id, body.text, body.metadata)
    commit(ctx.session)
    ctx.session.refresh(fact)
    return MemoryOut.of(fact, service.owner_id(fact))


@router.delete("/memories/{memory_id}")
def delete(ctx: AdminTenantContextDep, memory_id: MemoryIdPath) -> dict[str, Any]:
    service = MemoryService(ctx)
    fact = service.get(memory_id)
    key = fact_key(ctx.tenant, fact, ctx.engine.encoding_config())
    service.delete(memory_id)
    commit(ctx.session)
    placement = ctx.engine.placement(ctx.tenant, [key])[0]
    on_disk = ctx.engine.has(ctx.tenant, [key])
    return {"deleted": 1, "kv_tier_after": placement, "kv_file_after": on_disk}
