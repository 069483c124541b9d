"""FastAPI dependencies, as ``Annotated`` aliases: the only place routes get what they need."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Header, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from backend.api.metrics import TENANT_REQUESTS
from backend.api.middleware import ADMITTED
from backend.core.config import Settings
from backend.core.security import hash_api_key
from backend.db.session import commit, session_factory
from backend.errors import ForbiddenError, NotFoundError, RateLimitedError, UnauthorizedError
from backend.repositories.tenants import ApiKeyRepository, LimitOverrides, TenantRepository
from backend.resources import Resources
from backend.services.context import TenantContext
from backend.services.credentials import Credential
from backend.services.rate_limits import Admission, TenantLimits
from backend.services.tenants import TenantService
from gpu_runtime.client.inflight import InFlight, tracked_of
from gpu_runtime.types import TenantId

# Dependencies that do no I/O are ``async def``: FastAPI runs a plain ``def`` dependency in the
# thread pool, and on a chat's path those hops (about ten, a fraction of a millisecond each while
# threads wake) were most of its authentication lap. What blocks (Redis, Postgres) stays ``def``.


async def get_resources(request: Request) -> Resources:
    resources: Resources = request.app.state.resources
    return resources


ResourcesDep = Annotated[Resources, Depends(get_resources)]


async def get_settings_dep(resources: ResourcesDep) -> Settings:
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
    limits: LimitOverrides = field(default_factory=LimitOverrides)


# Declares the scheme in the OpenAPI document; our own 401 says what is missing.
_BEARER = HTTPBearer(auto_error=False, description="a tenant API key, or the admin key")


def _presented_key(
    credentials: HTTPAuthorizationCredentials | None, authorization: str | None
) -> str | None:
    """The key of ``Bearer <key>`` or, as Mem0's SDK sends it, ``Token <key>``."""
    if credentials is not None and credentials.credentials:
        return credentials.credentials.strip()
    scheme, _, key = (authorization or "").strip().partition(" ")
    return key.strip() or None if scheme.lower() == "token" else None


BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]
AuthorizationDep = Annotated[str | None, Header(include_in_schema=False)]


def get_caller(
    resources: ResourcesDep, credentials: BearerDep = None, authorization: AuthorizationDep = None
) -> Caller:
    return resolve_caller(resources, credentials, authorization)


def resolve_caller(
    resources: Resources,
    credentials: HTTPAuthorizationCredentials | None,
    authorization: str | None,
) -> Caller:
    """Who presents the request's key (blocking: Redis, and Postgres when the key is not
    cached); a 401 if no one."""
    key = _presented_key(credentials, authorization)
    if key is None:
        raise UnauthorizedError("missing 'Authorization: Bearer <api key>' (or 'Token <api key>')")
    settings = resources.settings
    if key == settings.admin_api_key:
        return Caller("admin", None)
    cache = resources.credentials
    key_hash = hash_api_key(key, settings.api_key_pepper)
    generation = cache.generation()  # read before the lookup (services/credentials.py)
    cached = cache.get(key_hash, generation)
    if cached is not None:
        return Caller(cached.scope, cached.tenant_id, cached.limits)
    # Its own short session: the connection goes back to the pool at once, never held while
    # the request waits for a worker thread (at 100 concurrent chats each request held one from
    # authentication to its commit: the pool ran dry, 503s).
    with session_factory()() as session:
        caller = _tenant_caller(session, settings, key)
    cache.put(key_hash, Credential(caller.scope, caller.tenant_id, caller.limits), generation)
    return caller


def _tenant_caller(session: Session, settings: Settings, key: str) -> Caller:
    found = ApiKeyRepository(session, settings.api_key_pepper).find_active(key)
    if found is None:  # unknown, revoked, or its tenant deleted
        raise UnauthorizedError("invalid or revoked API key")
    row, limits = found
    return Caller(row.scope, row.tenant_id, limits)


CallerDep = Annotated[Caller, Depends(get_caller)]


async def require_admin(caller: CallerDep) -> Caller:
    if caller.scope != "admin":
        raise ForbiddenError("this endpoint needs an admin key")
    return caller


AdminDep = Annotated[Caller, Depends(require_admin)]


def admit_tenant(
    http: Request,
    resources: ResourcesDep,
    credentials: BearerDep = None,
    authorization: AuthorizationDep = None,
) -> Iterator[Admission]:
    """A tenant's request, authenticated and let in under its limits (else OpenAI's 429), in
    one thread hop; its slot in flight is given back once the response is sent, a streamed one
    included (``scope="request"``). When it started and ended go in the request's state (a
    chat reports them)."""
    started = time.perf_counter()
    tracked = tracked_of(http.scope)
    if tracked is not None:
        InFlight.move(tracked, "admission", in_thread=True)
    caller = resolve_caller(resources, credentials, authorization)
    if caller.scope != "tenant" or caller.tenant_id is None:
        raise ForbiddenError("this endpoint needs a tenant key")
    tenant = TenantId(str(caller.tenant_id))
    if tracked is not None:
        tracked.tenant = tenant.value
    limits = effective_limits(caller.limits, resources.settings)
    try:
        admission = resources.limiter.admit(tenant, limits)
    except RateLimitedError:
        TENANT_REQUESTS.labels(tenant.value, "limited").inc()
        raise
    TENANT_REQUESTS.labels(tenant.value, "admitted").inc()
    http.scope.setdefault("state", {})[ADMITTED] = (started, time.perf_counter())
    if tracked is not None:
        InFlight.move(tracked, "admitted")  # (its task's, on the loop again)
    try:
        yield admission
    finally:
        admission.release()


AdmissionDep = Annotated[Admission, Depends(admit_tenant, scope="request")]


async def require_tenant(admission: AdmissionDep) -> TenantId:
    return admission.tenant


TenantDep = Annotated[TenantId, Depends(require_tenant)]


def effective_limits(overrides: LimitOverrides, settings: Settings) -> TenantLimits:
    def pick(own: int | None, default: int) -> int:
        return default if own is None else own

    return TenantLimits(
        requests_per_window=pick(overrides.requests_per_minute, settings.rate_limit_requests),
        tokens_per_window=pick(overrides.tokens_per_minute, settings.rate_limit_tokens),
        concurrent=pick(overrides.max_concurrent_requests, settings.rate_limit_concurrent),
        weight=overrides.fair_weight or 1.0,
    )


def get_tenant_context(
    session: SessionDep, tenant: TenantDep, resources: ResourcesDep
) -> TenantContext:
    return resources.tenant_context(session, tenant)


TenantContextDep = Annotated[TenantContext, Depends(get_tenant_context)]


def get_admin_tenant_context(
    tenant_id: uuid.UUID, _: AdminDep, session: SessionDep, resources: ResourcesDep
) -> TenantContext:
    """An operator acting on one tenant's data (the memory browser): the tenant named in the
    path, which must exist; the same services and checks as the tenant's own key."""
    if TenantRepository(session).get(tenant_id) is None:
        raise NotFoundError(f"tenant {tenant_id} not found")
    return resources.tenant_context(session, TenantId(str(tenant_id)))


AdminTenantContextDep = Annotated[TenantContext, Depends(get_admin_tenant_context)]


def get_tenant_service(
    session: SessionDep, settings: SettingsDep, resources: ResourcesDep
) -> TenantService:
    return TenantService(
        session,
        settings.api_key_pepper,
        resources.engine,
        resources.index,
        resources.limiter,
        resources.credentials,
    )


TenantServiceDep = Annotated[TenantService, Depends(get_tenant_service)]

IdempotencyKeyDep = Annotated[
    str | None, Header(alias="Idempotency-Key", min_length=1, max_length=200)
]


__all__ = ["commit"]
