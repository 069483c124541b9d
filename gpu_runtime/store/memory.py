"""The worker half's KV store without budgets: memory, backed by disk (``pool.budget`` opens it).

Everything lives in process memory; with a disk root, every put is also written durably (the
packed store) and a miss in memory is filled from disk, so earlier runs' encodings are served.
Every method takes the tenant explicitly and refuses keys of another tenant.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from gpu_runtime.errors import TenantMismatchError
from gpu_runtime.store.base import DurableKVStore
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId


def _check(tenant: TenantId, key: FactKey) -> None:
    if key.tenant != tenant:
        raise TenantMismatchError(f"key of tenant {key.tenant.value!r} used as {tenant.value!r}")


class InMemoryKVStore:
    """Thread-safe map FactKey -> FactKV, partitioned by tenant, optionally disk-backed."""

    def __init__(self, disk: DurableKVStore | None = None) -> None:
        self._lock = threading.Lock()
        self._by_tenant: dict[TenantId, dict[FactKey, FactKV]] = {}
        self.disk = disk

    def put(self, tenant: TenantId, key: FactKey, kv: FactKV) -> None:
        self.put_many(tenant, [(key, kv)])

    def put_many(self, tenant: TenantId, items: Sequence[tuple[FactKey, FactKV]]) -> None:
        for key, _ in items:
            _check(tenant, key)
        if self.disk is not None:
            self.disk.put_many(items)
        with self._lock:
            held = self._by_tenant.setdefault(tenant, {})
            for key, kv in items:
                held[key] = kv

    def get(self, tenant: TenantId, key: FactKey) -> FactKV | None:
        _check(tenant, key)
        with self._lock:
            kv = self._by_tenant.get(tenant, {}).get(key)
        if kv is None and self.disk is not None:
            kv = self.disk.get(key)
            if kv is not None:
                with self._lock:
                    self._by_tenant.setdefault(tenant, {})[key] = kv
        return kv

    def contains_all(self, tenant: TenantId, keys: Iterable[FactKey]) -> bool:
        """Asked on every scheduling step: memory under the lock, disk only for what's missing."""
        wanted = list(keys)
        for key in wanted:
            _check(tenant, key)
        with self._lock:
            entries = self._by_tenant.get(tenant, {})
            missing = [key for key in wanted if key not in entries]
        return all(self.disk is not None and self.disk.exists(key) for key in missing)

    def delete(self, tenant: TenantId, key: FactKey) -> bool:
        return self.delete_many(tenant, [key]) > 0

    def delete_many(self, tenant: TenantId, keys: Sequence[FactKey]) -> int:
        for key in keys:
            _check(tenant, key)
        with self._lock:
            entries = self._by_tenant.get(tenant, {})
            held = {key for key in keys if entries.pop(key, None) is not None}
        if self.disk is not None:
            held |= {key for key in keys if self.disk.exists(key)}
            self.disk.delete_many(tenant, keys)
        return len(held)

    def delete_tenant(self, tenant: TenantId) -> None:
        with self._lock:
            self._by_tenant.pop(tenant, None)
        if self.disk is not None:
            self.disk.delete_tenant(tenant)

    def prefetch(self, tenant: TenantId, keys: list[FactKey]) -> None:
        return None  # one tier: nothing to move ahead of a request

    def reclaim(self) -> None:
        return None  # nothing is pinned

    def keys(self, tenant: TenantId) -> list[FactKey]:
        with self._lock:
            held = set(self._by_tenant.get(tenant, {}))
        if self.disk is not None:
            held |= set(self.disk.keys(tenant))
        return sorted(held)


__all__ = ["InMemoryKVStore"]
