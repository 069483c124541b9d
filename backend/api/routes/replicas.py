"""Runtime replicas (admin): each one's health as this API process sees it, and which replica
serves each tenant (rendezvous order over the healthy replicas)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from backend.api.deps import AdminDep, ResourcesDep, SessionDep
from backend.api.schemas.common import AUTHED, error_responses
from backend.api.schemas.text import OffsetQuery
from backend.repositories.base import Page
from backend.repositories.tenants import TenantRepository
from gpu_runtime.types import TenantId

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=error_responses(*AUTHED))


@router.get("/replicas")
def replicas(
    _: AdminDep,
    session: SessionDep,
    resources: ResourcesDep,
    offset: OffsetQuery = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> dict[str, Any]:
    """``replicas``: every replica (probed now) with the number of listed tenants it serves;
    ``placement``: per tenant (a page of them, oldest first) its replica and its whole order,
    the replica it moves to first if its own fails. (A plain ``def``: the database and the
    probes block, so it runs in the thread pool, never on the event loop.)"""
    engine = resources.engine
    views = engine.replica_status()
    tenants, total = TenantRepository(session).list(Page(offset, limit))
    placement = []
    for tenant in tenants:
        order = engine.replica_order(TenantId(str(tenant.id)))
        placement.append({"tenant_id": str(tenant.id), "name": tenant.name,
                          "replica": order[0], "order": order})  # fmt: skip
    for view in views:
        view["tenants"] = sum(1 for row in placement if row["replica"] == view["url"])
    return {"replicas": views, "placement": placement, "total": total, "offset": offset,
            "limit": limit}  # fmt: skip
