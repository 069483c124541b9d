"""Shared helpers: tenant ids as UUIDs, pagination."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session

from gpu_runtime.types import TenantId


def tenant_uuid(tenant: TenantId) -> uuid.UUID:
    return uuid.UUID(tenant.value)


@dataclass(frozen=True)
class Page:
    offset: int = 0
    limit: int = 50


class TenantScoped:
    """Base for repositories of tenant-owned tables: one session, one tenant."""

    def __init__(self, session: Session, tenant: TenantId) -> None:
        self.session = session
        self.tenant = tenant
        self.tenant_uuid = tenant_uuid(tenant)
