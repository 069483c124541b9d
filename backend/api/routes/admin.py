"""Admin: tenants and their API keys (writes through ``TenantService``)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from backend.api.deps import AdminDep, IdempotencyKeyDep, SessionDep, TenantServiceDep, commit
from backend.api.idempotency import run_idempotent
from backend.api.schemas.admin import (
    ApiKeyCreated,
    ApiKeyOut,
    TenantCreate,
    TenantCreated,
    TenantOut,
)
from backend.api.schemas.common import AUTHED, PageOut, error_responses
from backend.api.schemas.text import OffsetQuery
from backend.repositories.base import Page
from backend.repositories.tenants import TenantRepository

router = APIRouter(prefix="/v1/tenants", tags=["admin"], responses=error_responses(*AUTHED))


@router.post("", status_code=201, response_model=TenantCreated, responses=error_responses(409))
def create_tenant(
    body: TenantCreate,
    _: AdminDep,
    session: SessionDep,
    tenants: TenantServiceDep,
    idempotency_key: IdempotencyKeyDep = None,
) -> JSONResponse:
    def action() -> TenantCreated:
        tenant, plaintext = tenants.create(body.name)
        return TenantCreated(**TenantOut.of(tenant).model_dump(), api_key=plaintext)

    return run_idempotent(session, "admin", idempotency_key, body, action)


@router.get("", response_model=PageOut[TenantOut])
def list_tenants(
    _: AdminDep,
    session: SessionDep,
    offset: OffsetQuery = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[TenantOut]:
    rows, total = TenantRepository(session).list(Page(offset, limit))
    return PageOut(items=[TenantOut.of(r) for r in rows], total=total, offset=offset, limit=limit)


@router.get("/{tenant_id}", response_model=TenantOut, responses=error_responses(404))
def get_tenant(tenant_id: uuid.UUID, _: AdminDep, tenants: TenantServiceDep) -> TenantOut:
    return TenantOut.of(tenants.get(tenant_id))


@router.delete("/{tenant_id}", status_code=204, responses=error_responses(404))
def delete_tenant(
    tenant_id: uuid.UUID, _: AdminDep, session: SessionDep, tenants: TenantServiceDep
) -> Response:
    """Deletes the tenant and everything it stored (rows, keys, stored responses), and purges
    its KV (every tier and file) and retrieval indexes before answering."""
    tenants.delete(tenant_id)
    commit(session)
    return Response(status_code=204)


@router.get("/{tenant_id}/keys", response_model=list[ApiKeyOut], responses=error_responses(404))
def list_keys(tenant_id: uuid.UUID, _: AdminDep, tenants: TenantServiceDep) -> list[ApiKeyOut]:
    return [ApiKeyOut.of(r) for r in tenants.keys_of(tenant_id)]


@router.post(
    "/{tenant_id}/keys", status_code=201, response_model=ApiKeyCreated,
    responses=error_responses(404, 409),
)  # fmt: skip
def rotate_key(
    tenant_id: uuid.UUID,
    _: AdminDep,
    session: SessionDep,
    tenants: TenantServiceDep,
    revoke_existing: bool = True,
    idempotency_key: IdempotencyKeyDep = None,
) -> JSONResponse:
    """Issue a new key; by default the tenant's other keys stop working (rotation)."""
    tenants.get(tenant_id)

    def action() -> ApiKeyCreated:
        row, plaintext = tenants.issue_key(tenant_id, revoke_existing)
        return ApiKeyCreated(**ApiKeyOut.of(row).model_dump(), api_key=plaintext)

    request = {"tenant_id": str(tenant_id), "revoke_existing": revoke_existing}
    return run_idempotent(session, "admin", idempotency_key, request, action)


@router.delete(
    "/{tenant_id}/keys/{key_id}", response_model=ApiKeyOut, responses=error_responses(404)
)
def revoke_key(
    tenant_id: uuid.UUID, key_id: uuid.UUID, _: AdminDep, session: SessionDep,
    tenants: TenantServiceDep,
) -> ApiKeyOut:  # fmt: skip
    row = tenants.revoke_key(tenant_id, key_id)
    commit(session)
    return ApiKeyOut.of(row)
