"""The store interface the connector halves and the runtime use (memory or tiered pool)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId


class KVStore(Protocol):
    def put(self, tenant: TenantId, key: FactKey, kv: FactKV) -> None: ...

    def get(self, tenant: TenantId, key: FactKey) -> FactKV | None: ...

    def contains_all(self, tenant: TenantId, keys: Iterable[FactKey]) -> bool: ...

    def delete(self, tenant: TenantId, key: FactKey) -> bool: ...

    def delete_tenant(self, tenant: TenantId) -> None: ...

    def keys(self, tenant: TenantId) -> list[FactKey]: ...

    def prefetch(self, tenant: TenantId, keys: list[FactKey]) -> None:
        """A hint that a request will read ``keys`` soon (tiered pool: start promoting)."""
        ...

    def reclaim(self) -> None:
        """Housekeeping the engine loop runs while idle, off any request's critical path
        (tiered pool: release the pins of reads that have completed)."""
        ...
