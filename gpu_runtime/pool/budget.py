"""The KV store a connector worker half opens: with a budget, the tiered pool (GPU slabs ->
pinned host -> disk); without one, memory backed by disk (``store.memory``); with no disk root,
memory alone. The pool builds on the store, never the other way round."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.store.base import KVStore
from gpu_runtime.store.memory import InMemoryKVStore
from gpu_runtime.store.packed import PackedKVStore


@dataclass(frozen=True)
class PoolBudget:
    gpu_bytes: int
    host_bytes: int
    slab_bytes: int
    tenant_gpu_quota_bytes: int | None = None


def open_store(disk_root: Path | str | None, budget: PoolBudget | None) -> KVStore:
    if disk_root and budget is not None:
        return TieredKVPool.create(
            Path(disk_root),
            budget.gpu_bytes,
            budget.host_bytes,
            budget.slab_bytes,
            budget.tenant_gpu_quota_bytes,
        )
    return InMemoryKVStore(PackedKVStore(Path(disk_root)) if disk_root else None)
