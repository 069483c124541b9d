"""The KV store the connector halves and the runtime share: memory, backed by disk.

Everything lives in process memory; with a disk root, every put is also written durably and a
miss in memory is filled from disk, so other processes' encodings and earlier runs' are served.
Every method takes the tenant explicitly and refuses keys of another tenant.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpu_runtime.pool.index import TenantMismatchError
from gpu_runtime.store.base import KVStore
from gpu_runtime.store.disk import DiskKVStore
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId


def _check(tenant: TenantId, key: FactKey) -> None:
    if key.tenant != tenant:
        raise TenantMismatchError(f"key of tenant {key.tenant.value!r} used as {tenant.value!r}")


class InMemoryKVStore:
    """Thread-safe map FactKey -> FactKV, partitioned by tenant, optionally disk-backed."""

    def __init__(self, disk: DiskKVStore | None = None) -> None:
        self._lock = threading.Lock()
        self._by_tenant: dict[TenantId, dict[FactKey, FactKV]] = {}
        self.disk = disk

    def put(self, tenant: TenantId, key: FactKey, kv: FactKV) -> None:
        _check(tenant, key)
        if self.disk is not None:
            self.disk.put(key, kv)
        with self._lock:
            self._by_tenant.setdefault(tenant, {})[key] = kv

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
        _check(tenant, key)
        with self._lock:
            held = self._by_tenant.get(tenant, {}).pop(key, None) is not None
        on_disk = self.disk.delete(key) if self.disk is not None else False
        return held or on_disk

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


@dataclass(frozen=True)
class PoolBudget:
    gpu_bytes: int
    host_bytes: int
    slab_bytes: int
    tenant_gpu_quota_bytes: int | None = None


_STORES: dict[str, KVStore] = {}
_STORES_LOCK = threading.Lock()


def store_named(
    name: str, disk_root: Path | str | None = None, budget: PoolBudget | None = None
) -> KVStore:
    """The process's store of that name: the engine's connector halves and the runtime meet
    here. The first caller decides what backs it: with a disk root and a budget, the tiered pool
    (GPU slabs -> pinned host -> disk); with a disk root only, memory backed by disk."""
    with _STORES_LOCK:
        if name not in _STORES:
            if disk_root and budget is not None:
                from gpu_runtime.pool.tensors import TieredKVPool

                _STORES[name] = TieredKVPool.create(
                    Path(disk_root),
                    budget.gpu_bytes,
                    budget.host_bytes,
                    budget.slab_bytes,
                    budget.tenant_gpu_quota_bytes,
                )
            else:
                disk = DiskKVStore(Path(disk_root)) if disk_root else None
                _STORES[name] = InMemoryKVStore(disk)
        return _STORES[name]


__all__ = ["InMemoryKVStore", "PoolBudget", "TenantMismatchError", "store_named"]
