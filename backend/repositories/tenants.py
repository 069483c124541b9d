"""Tenants and API keys (admin scope: these are not tenant-owned lookups)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from backend.core.security import display_prefix, generate_api_key, hash_api_key
from backend.db.models import ApiKey, Tenant
from backend.errors import ConflictError
from backend.repositories.base import Page


@dataclass(frozen=True)
class LimitOverrides:
    """A tenant's own limits (None: the settings' default; 0: none)."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None
    fair_weight: float | None = None


class TenantRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def create(self, name: str) -> Tenant:
        tenant = Tenant(name=name)
        self.session.add(tenant)
        try:
            with self.session.begin_nested():
                self.session.flush()
        except IntegrityError as exc:
            raise ConflictError(f"a tenant named {name!r} already exists") from exc
        return tenant

    def get(self, tenant_id: uuid.UUID) -> Tenant | None:
        tenant = self.session.get(Tenant, tenant_id)
        return tenant if tenant is not None and tenant.deleted_at is None else None

    def list(self, page: Page) -> tuple[list[Tenant], int]:
        live = select(Tenant).where(Tenant.deleted_at.is_(None))
        total = self.session.scalar(select(func.count()).select_from(live.subquery())) or 0
        rows = self.session.scalars(
            live.order_by(Tenant.created_at, Tenant.id).offset(page.offset).limit(page.limit)
        )
        return list(rows), total

    def live_ids(self) -> Sequence[uuid.UUID]:
        return self.session.scalars(select(Tenant.id).where(Tenant.deleted_at.is_(None))).all()

    def delete(self, tenant: Tenant) -> None:
        """Every row of the tenant goes with it (foreign keys cascade: keys, users, turns,
        facts and their history, encodings, jobs, the request log)."""
        self.session.delete(tenant)
        self.session.flush()


class ApiKeyRepository:
    def __init__(self, session: Session, pepper: str) -> None:
        self.session = session
        self.pepper = pepper

    def issue(self, tenant_id: uuid.UUID | None, scope: str) -> tuple[ApiKey, str]:
        """A new key; the plaintext is returned once and never stored."""
        plaintext = generate_api_key()
        row = ApiKey(
            tenant_id=tenant_id,
            scope=scope,
            prefix=display_prefix(plaintext),
            key_hash=hash_api_key(plaintext, self.pepper),
        )
        self.session.add(row)
        self.session.flush()
        return row, plaintext

    def find_active(self, plaintext: str) -> tuple[ApiKey, LimitOverrides] | None:
        """The key if it is not revoked and its tenant (if any) is not deleted, with the
        tenant's limit overrides: one query, as every request authenticates."""
        row = self.session.execute(
            select(
                ApiKey,
                Tenant.requests_per_minute,
                Tenant.tokens_per_minute,
                Tenant.max_concurrent_requests,
                Tenant.fair_weight,
            )
            .outerjoin(Tenant, Tenant.id == ApiKey.tenant_id)
            .where(
                ApiKey.key_hash == hash_api_key(plaintext, self.pepper),
                ApiKey.revoked_at.is_(None),
                or_(ApiKey.tenant_id.is_(None), Tenant.deleted_at.is_(None)),
            )
        ).first()
        if row is None:
            return None
        return row[0], LimitOverrides(row[1], row[2], row[3], row[4])

    def for_tenant(self, tenant_id: uuid.UUID) -> list[ApiKey]:
        return list(
            self.session.scalars(
                select(ApiKey).where(ApiKey.tenant_id == tenant_id).order_by(ApiKey.created_at)
            )
        )

    def get(self, key_id: uuid.UUID) -> ApiKey | None:
        return self.session.get(ApiKey, key_id)

    def revoke(self, row: ApiKey) -> None:
        if row.revoked_at is None:
            row.revoked_at = datetime.now(UTC)

    def revoke_all(self, tenant_id: uuid.UUID) -> None:
        for row in self.for_tenant(tenant_id):
            self.revoke(row)
