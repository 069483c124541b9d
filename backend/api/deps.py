"""FastAPI dependencies, as ``Annotated`` aliases: the only place routes get what they need."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from backend.api.resources import Resources
from backend.core.config import Settings
from backend.db.session import commit, session_factory
from backend.errors import ForbiddenError, UnauthorizedError
from backend.repositories.tenants import ApiKeyRepository, TenantRepository
from backend.services.context import TenantContext
from gpu_runtime.types import TenantId


def get_resources(request: Request) -> Resources:
    resources: Resources = request.app.state.resources
    return resources


ResourcesDep = Annotated[Resources, Depends(get_resources)]


def get_settings_dep(resources: ResourcesDep) -> Settings:
    return resources.settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


def get_session() -> Iterator[Session]:
    """One transaction per request; routes call ``commit`` when their work is complete, anything
    not committed is rolled back."""
    with session_factory()() as session:
        try:
            yield session
        finally:
            session.rollback()


SessionDep = Annotated[Session, Depends(get_session)]


@dataclass(frozen=True)
class Caller:
    scope: str  # "admin" | "tenant"
    tenant_id: uuid.UUID | None


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise UnauthorizedError("missing 'Authorization: Bearer <api key>' header")
    return authorization.split(" ", 1)[1].strip()


def get_caller(
    session: SessionDep,
    settings: SettingsDep,
    authorization: Annotated[str | None, Header()] = None,
) -> Caller:
    key = _bearer(authorization)
    if key == settings.admin_api_key:
        return Caller("admin", None)
    row = ApiKeyRepository(session, settings.api_key_pepper).find_active(key)
    if row is None:
        raise UnauthorizedError("invalid or revoked API key")
    if row.scope == "tenant":
        assert row.tenant_id is not None
        if TenantRepository(session).get(row.tenant_id) is None:
            raise UnauthorizedError("this key's tenant no longer exists")
    return Caller(row.scope, row.tenant_id)


CallerDep = Annotated[Caller, Depends(get_caller)]


def require_admin(caller: CallerDep) -> Caller:
    if caller.scope != "admin":
        raise ForbiddenError("this endpoint needs an admin key")
    return caller


AdminDep = Annotated[Caller, Depends(require_admin)]


def require_tenant(caller: CallerDep) -> TenantId:
    if caller.scope != "tenant" or caller.tenant_id is None:
        raise ForbiddenError("this endpoint needs a tenant key")
    return TenantId(str(caller.tenant_id))


TenantDep = Annotated[TenantId, Depends(require_tenant)]


def get_tenant_context(
    session: SessionDep, tenant: TenantDep, resources: ResourcesDep
) -> TenantContext:
    return TenantContext(
        session=session,
        tenant=tenant,
        index=resources.index,
        embedder=resources.embedder,
        engine=resources.engine,
        enqueue=resources.enqueue,
    )


TenantContextDep = Annotated[TenantContext, Depends(get_tenant_context)]

IdempotencyKeyDep = Annotated[str | None, Header(alias="Idempotency-Key")]


__all__ = ["commit"]
