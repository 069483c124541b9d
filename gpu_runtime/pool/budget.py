"""The KV store a connector worker half opens: with a budget, the tiered pool (GPU slabs ->
pinned host -> disk); without one, memory backed by disk (``store.memory``); with no disk root,
memory alone. The pool builds on the store, never the other way round."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.store.base import DurableKVStore, KVStore
from gpu_runtime.store.memory import InMemoryKVStore
from gpu_runtime.store.packed import PackedKVStore


@dataclass(frozen=True)
class PoolBudget:
    gpu_bytes: int
    host_bytes: int
    slab_bytes: int
    tenant_gpu_quota_bytes: int | None = None


def open_store(
    disk_root: Path | str | None,
    budget: PoolBudget | None,
    wrap_disk: Callable[[DurableKVStore], DurableKVStore] | None = None,
) -> KVStore:
    """``wrap_disk``: how this worker sees the durable store (under tensor parallelism, a
    rank's slices of whole facts: ``store.shards``)."""
    disk: DurableKVStore | None = PackedKVStore(Path(disk_root)) if disk_root else None
    if disk is not None and wrap_disk is not None:
        disk = wrap_disk(disk)
    if disk is not None and budget is not None:
        return TieredKVPool.create(
            disk,
            budget.gpu_bytes,
            budget.host_bytes,
            budget.slab_bytes,
            budget.tenant_gpu_quota_bytes,
        )
    return InMemoryKVStore(disk)
