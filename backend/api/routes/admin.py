"""Admin: tenants and their API keys."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse

from backend.api.deps import (
    AdminDep,
    IdempotencyKeyDep,
    ResourcesDep,
    SessionDep,
    SettingsDep,
    commit,
)
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
from backend.db.models import ApiKey, Tenant
from backend.errors import NotFoundError
from backend.repositories.base import Page
from backend.repositories.requests import IdempotencyRepository
from backend.repositories.tenants import ApiKeyRepository, TenantRepository
from gpu_runtime.types import TenantId

router = APIRouter(prefix="/v1/tenants", tags=["admin"], responses=error_responses(*AUTHED))


def _tenant_out(row: Tenant) -> TenantOut:
    return TenantOut(id=row.id, name=row.name, created_at=row.created_at)


def _key_out(row: ApiKey) -> ApiKeyOut:
    return ApiKeyOut(
        id=row.id,
        prefix=row.prefix,
        scope=row.scope,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


def _tenant(session: SessionDep, tenant_id: uuid.UUID) -> Tenant:
    row = TenantRepository(session).get(tenant_id)
    if row is None:
        raise NotFoundError(f"tenant {tenant_id} not found")
    return row


@router.post("", status_code=201, response_model=TenantCreated, responses=error_responses(409))
def create_tenant(
    body: TenantCreate,
    _: AdminDep,
    session: SessionDep,
    settings: SettingsDep,
    idempotency_key: IdempotencyKeyDep = None,
) -> JSONResponse:
    def action() -> TenantCreated:
        tenant = TenantRepository(session).create(body.name)
        _, plaintext = ApiKeyRepository(session, settings.api_key_pepper).issue(tenant.id, "tenant")
        session.refresh(tenant)
        return TenantCreated(**_tenant_out(tenant).model_dump(), api_key=plaintext)

    return run_idempotent(session, "admin", idempotency_key, body, action)


@router.get("", response_model=PageOut[TenantOut])
def list_tenants(
    _: AdminDep,
    session: SessionDep,
    offset: OffsetQuery = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> PageOut[TenantOut]:
    rows, total = TenantRepository(session).list(Page(offset, limit))
    return PageOut(items=[_tenant_out(r) for r in rows], total=total, offset=offset, limit=limit)


@router.get("/{tenant_id}", response_model=TenantOut, responses=error_responses(404))
def get_tenant(tenant_id: uuid.UUID, _: AdminDep, session: SessionDep) -> TenantOut:
    return _tenant_out(_tenant(session, tenant_id))


@router.delete("/{tenant_id}", status_code=204, responses=error_responses(404))
def delete_tenant(
    tenant_id: uuid.UUID,
    _: AdminDep,
    session: SessionDep,
    resources: ResourcesDep,
) -> Response:
    """Deletes the tenant and everything it stored (rows, keys, stored responses), and purges
    its KV (every tier and file) and retrieval indexes before answering."""
    tenant = _tenant(session, tenant_id)
    typed = TenantId(str(tenant.id))
    IdempotencyRepository(session, typed.value).forget_all()
    TenantRepository(session).delete(tenant)
    resources.engine.purge_tenant(typed)
    resources.index.drop_tenant(typed)
    commit(session)
    return Response(status_code=204)


@router.get("/{tenant_id}/keys", response_model=list[ApiKeyOut], responses=error_responses(404))
def list_keys(
    tenant_id: uuid.UUID, _: AdminDep, session: SessionDep, settings: SettingsDep
) -> list[ApiKeyOut]:
    _tenant(session, tenant_id)
    return [
        _key_out(r)
        for r in ApiKeyRepository(session, settings.api_key_pepper).for_tenant(tenant_id)
    ]


@router.post(
    "/{tenant_id}/keys", status_code=201, response_model=ApiKeyCreated,
    responses=error_responses(404, 409),
)  # fmt: skip
def rotate_key(
    tenant_id: uuid.UUID,
    _: AdminDep,
    session: SessionDep,
    settings: SettingsDep,
    revoke_existing: bool = True,
    idempotency_key: IdempotencyKeyDep = None,
) -> JSONResponse:
    """Issue a new key; by default the tenant's other keys stop working (rotation)."""
    _tenant(session, tenant_id)
    keys = ApiKeyRepository(session, settings.api_key_pepper)

    def action() -> ApiKeyCreated:
        if revoke_existing:
            keys.revoke_all(tenant_id)
        row, plaintext = keys.issue(tenant_id, "tenant")
        session.refresh(row)
        return ApiKeyCreated(**_key_out(row).model_dump(), api_key=plaintext)

    request = {"tenant_id": str(tenant_id), "revoke_existing": revoke_existing}
    return run_idempotent(session, "admin", idempotency_key, request, action)


@router.delete(
    "/{tenant_id}/keys/{key_id}", response_model=ApiKeyOut, responses=error_responses(404)
)
def revoke_key(
    tenant_id: uuid.UUID, key_id: uuid.UUID, _: AdminDep, session: SessionDep, settings: SettingsDep
) -> ApiKeyOut:
    keys = ApiKeyRepository(session, settings.api_key_pepper)
    row = keys.get(key_id)
    if row is None or row.tenant_id != tenant_id:
        raise NotFoundError(f"key {key_id} not found")
    keys.revoke(row)
    commit(session)
    return _key_out(row)
