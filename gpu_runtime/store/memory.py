"""In-process KV store, shared by the scheduler and worker halves of the connector.

The tiered GPU/host/disk pools replace this behind the same interface; here everything lives in
process memory. Every method takes the tenant explicitly and refuses keys of another tenant.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId


class TenantMismatchError(ValueError):
    """A key of one tenant was used under another tenant's name."""


def _check(tenant: TenantId, key: FactKey) -> None:
    if key.tenant != tenant:
        raise TenantMismatchError(f"key of tenant {key.tenant.value!r} used as {tenant.value!r}")


class InMemoryKVStore:
    """Thread-safe map FactKey -> FactKV, partitioned by tenant."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_tenant: dict[TenantId, dict[FactKey, FactKV]] = {}

    def put(self, tenant: TenantId, key: FactKey, kv: FactKV) -> None:
        _check(tenant, key)
        with self._lock:
            self._by_tenant.setdefault(tenant, {})[key] = kv

    def get(self, tenant: TenantId, key: FactKey) -> FactKV | None:
        _check(tenant, key)
        with self._lock:
            return self._by_tenant.get(tenant, {}).get(key)

    def contains_all(self, tenant: TenantId, keys: Iterable[FactKey]) -> bool:
        with self._lock:
            entries = self._by_tenant.get(tenant, {})
            for key in keys:
                _check(tenant, key)
                if key not in entries:
                    return False
            return True

    def delete(self, tenant: TenantId, key: FactKey) -> bool:
        _check(tenant, key)
        with self._lock:
            return self._by_tenant.get(tenant, {}).pop(key, None) is not None

    def keys(self, tenant: TenantId) -> list[FactKey]:
        with self._lock:
            return sorted(self._by_tenant.get(tenant, {}))


_STORES: dict[str, InMemoryKVStore] = {}
_STORES_LOCK = threading.Lock()


def store_named(name: str) -> InMemoryKVStore:
    """The process's store of that name: the engine's connector halves and the runtime meet here."""
    with _STORES_LOCK:
        return _STORES.setdefault(name, InMemoryKVStore())
