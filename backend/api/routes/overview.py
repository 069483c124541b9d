"""Operator views (admin): per-tenant memory and cache residency, recent request latency."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query

from backend.api.deps import AdminDep, SessionDep
from backend.repositories.overview import OverviewRepository

router = APIRouter(prefix="/v1/admin", tags=["admin"])


@router.get("/overview")
def overview(_: AdminDep, session: SessionDep) -> dict[str, Any]:
    return {"tenants": OverviewRepository(session).tenants()}


@router.get("/requests")
def requests(
    _: AdminDep,
    session: SessionDep,
    tenant_id: uuid.UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> dict[str, Any]:
    return {"requests": OverviewRepository(session).requests(tenant_id, limit)}
