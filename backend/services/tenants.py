"""Tenants and their API keys (the admin API's writes): create with a first key, delete with
everything the tenant stored, issue (rotate) and revoke keys."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from backend.db.models import ApiKey, Tenant
from backend.db.session import after_commit
from backend.errors import NotFoundError
from backend.repositories.requests import IdempotencyRepository
from backend.repositories.tenants import ApiKeyRepository, LimitOverrides, TenantRepository
from backend.retrieval.index import FactIndex
from backend.runtime.client import EngineClient
from backend.services.credentials import CredentialCache
from backend.services.rate_limits import RateLimiter
from gpu_runtime.types import TenantId

TENANT_SCOPE = "tenant"  # a key of one tenant (the admin key is the setting, not a row)


class TenantService:
    def __init__(
        self,
        session: Session,
        pepper: str,
        engine: EngineClient,
        index: FactIndex,
        limiter: RateLimiter | None = None,
        credentials: CredentialCache | None = None,
    ) -> None:
        self.session = session
        self.limiter = limiter
        self.credentials = credentials
        self.tenants = TenantRepository(session)
        self.keys = ApiKeyRepository(session, pepper)
        self.engine = engine
        self.index = index

    def get(self, tenant_id: uuid.UUID) -> Tenant:
        tenant = self.tenants.get(tenant_id)
        if tenant is None:
            raise NotFoundError(f"tenant {tenant_id} not found")
        return tenant

    def set_limits(self, tenant_id: uuid.UUID, limits: LimitOverrides) -> Tenant:
        """The tenant's own limits (None: the settings' default; 0: no limit)."""
        tenant = self.get(tenant_id)
        tenant.requests_per_minute = limits.requests_per_minute
        tenant.tokens_per_minute = limits.tokens_per_minute
        tenant.max_concurrent_requests = limits.max_concurrent_requests
        tenant.fair_weight = limits.fair_weight
        self.session.flush()
        self._keys_changed()
        return tenant

    def create(self, name: str) -> tuple[Tenant, str]:
        """The tenant and its first key's plaintext (shown once, never stored)."""
        tenant = self.tenants.create(name)
        _, plaintext = self.keys.issue(tenant.id, TENANT_SCOPE)
        self.session.refresh(tenant)
        return tenant, plaintext

    def delete(self, tenant_id: uuid.UUID) -> None:
        """The tenant and everything it stored (rows, keys, stored responses); its KV is purged
        from every tier and file of every runtime replica and its retrieval indexes dropped
        before this returns (a replica that cannot confirm fails the delete: nothing goes)."""
        tenant = self.get(tenant_id)
        typed = TenantId(str(tenant.id))
        self._keys_changed()
        IdempotencyRepository(self.session, typed.value).forget_all()
        self.tenants.delete(tenant)
        self.engine.purge_tenant(typed)
        self.index.drop_tenant(typed)
        if self.limiter is not None:
            self.limiter.forget(typed)  # its counters in Redis go too

    def keys_of(self, tenant_id: uuid.UUID) -> list[ApiKey]:
        self.get(tenant_id)
        return self.keys.for_tenant(tenant_id)

    def issue_key(self, tenant_id: uuid.UUID, revoke_existing: bool) -> tuple[ApiKey, str]:
        """A new key; with ``revoke_existing`` the tenant's other keys stop working (rotation)."""
        self.get(tenant_id)
        if revoke_existing:
            self.keys.revoke_all(tenant_id)
            self._keys_changed()
        row, plaintext = self.keys.issue(tenant_id, TENANT_SCOPE)
        self.session.refresh(row)
        return row, plaintext

    def revoke_key(self, tenant_id: uuid.UUID, key_id: uuid.UUID) -> ApiKey:
        row = self.keys.get(key_id)
        if row is None or row.tenant_id != tenant_id:
            raise NotFoundError(f"key {key_id} not found")
        self.keys.revoke(row)
        self._keys_changed()
        return row

    def _keys_changed(self) -> None:
        """What keys resolve to changed: every API process's cached keys stop serving once this
        transaction has committed (``services/credentials.py``)."""
        if self.credentials is not None:
            after_commit(self.session, self.credentials.invalidate)
