"""Admin: a tenant's limits (requests and tokens per minute, requests in flight) and its use of
them this window; the API enforces them on every tenant request (``deps.admit_tenant``)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from backend.api.deps import (
    AdminDep,
    ResourcesDep,
    SessionDep,
    TenantServiceDep,
    commit,
    effective_limits,
)
from backend.api.schemas.admin import TenantLimitsIn, TenantLimitsOut
from backend.api.schemas.common import AUTHED, error_responses
from backend.db.models import Tenant
from backend.repositories.tenants import LimitOverrides
from backend.resources import Resources
from gpu_runtime.types import TenantId

router = APIRouter(prefix="/v1/tenants", tags=["admin"], responses=error_responses(*AUTHED))


def _out(tenant: Tenant, resources: Resources) -> TenantLimitsOut:
    own = LimitOverrides(
        tenant.requests_per_minute,
        tenant.tokens_per_minute,
        tenant.max_concurrent_requests,
        tenant.fair_weight,
    )
    enforced = effective_limits(own, resources.settings)
    return TenantLimitsOut(
        overrides=TenantLimitsIn(
            requests_per_minute=own.requests_per_minute,
            tokens_per_minute=own.tokens_per_minute,
            max_concurrent_requests=own.max_concurrent_requests,
            fair_weight=own.fair_weight,
        ),
        effective=TenantLimitsIn(
            requests_per_minute=enforced.requests_per_window,
            tokens_per_minute=enforced.tokens_per_window,
            max_concurrent_requests=enforced.concurrent,
            fair_weight=enforced.weight,
        ),
        window_s=resources.settings.rate_limit_window_s,
        usage=resources.limiter.usage(TenantId(str(tenant.id))),
    )


@router.get("/{tenant_id}/limits", response_model=TenantLimitsOut, responses=error_responses(404))
def get_limits(
    tenant_id: uuid.UUID, _: AdminDep, tenants: TenantServiceDep, resources: ResourcesDep
) -> TenantLimitsOut:
    return _out(tenants.get(tenant_id), resources)


@router.put("/{tenant_id}/limits", response_model=TenantLimitsOut, responses=error_responses(404))
def set_limits(
    tenant_id: uuid.UUID,
    body: TenantLimitsIn,
    _: AdminDep,
    session: SessionDep,
    tenants: TenantServiceDep,
    resources: ResourcesDep,
) -> TenantLimitsOut:
    """Replaces the tenant's limits (a field left out or null: the platform's default); they
    hold from the tenant's next request on, in every API process."""
    overrides = LimitOverrides(
        body.requests_per_minute,
        body.tokens_per_minute,
        body.max_concurrent_requests,
        body.fair_weight,
    )
    tenant = tenants.set_limits(tenant_id, overrides)
    commit(session)
    return _out(tenant, resources)
