"""Tenants, keys, jobs."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from backend.api.schemas.text import Text
from backend.db.models import ApiKey, Tenant


class TenantCreate(BaseModel):
    name: Text = Field(min_length=1, max_length=200, pattern=r"^[\w .@-]+$")


class TenantOut(BaseModel):
    id: uuid.UUID
    name: str
    created_at: datetime

    @classmethod
    def of(cls, row: Tenant) -> TenantOut:
        return cls(id=row.id, name=row.name, created_at=row.created_at)


class TenantCreated(TenantOut):
    api_key: str


class ApiKeyOut(BaseModel):
    id: uuid.UUID
    prefix: str
    scope: str
    created_at: datetime
    revoked_at: datetime | None

    @classmethod
    def of(cls, row: ApiKey) -> ApiKeyOut:
        return cls(id=row.id, prefix=row.prefix, scope=row.scope, created_at=row.created_at,
                   revoked_at=row.revoked_at)  # fmt: skip


class ApiKeyCreated(ApiKeyOut):
    api_key: str


class JobOut(BaseModel):
    id: uuid.UUID
    kind: str
    status: str
    progress_done: int
    progress_total: int
    error: str
    created_at: datetime
    updated_at: datetime
    result: dict[str, Any] = Field(default_factory=dict)


class TenantLimitsIn(BaseModel):
    """A tenant's own limits: null keeps the platform's default, 0 means no limit."""

    requests_per_minute: int | None = Field(default=None, ge=0, le=10_000_000)
    tokens_per_minute: int | None = Field(default=None, ge=0, le=10_000_000_000)
    max_concurrent_requests: int | None = Field(default=None, ge=0, le=100_000)
    # Its share of the engine against other tenants' backlogs (2: twice a weight-1 tenant's).
    fair_weight: float | None = Field(default=None, gt=0, le=100)


class TenantLimitsOut(BaseModel):
    overrides: TenantLimitsIn  # as set (null: the default)
    effective: TenantLimitsIn  # what is enforced (0: no limit)
    window_s: float  # the "minute" the per-minute limits count over
    usage: dict[str, float]  # this window's requests and tokens, requests in flight
