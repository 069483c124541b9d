"""The KV store a connector worker half opens: with a budget, the tiered pool (GPU slabs ->
pinned host -> disk); without one, memory backed by disk (``store.memory``); with no disk root,
memory alone. The pool builds on the store, never the other way round."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
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

    def for_rows(self, row_bytes: Iterable[int]) -> PoolBudget:
        """The same budget in slabs that hold whole rows of each size (``whole_rows``)."""
        return replace(self, slab_bytes=whole_rows(self.slab_bytes, row_bytes))


SLAB_ALIGN = 256  # bytes: every slab starts this aligned (the kernel's reads stay aligned)


def whole_rows(slab_bytes: int, row_bytes: Iterable[int]) -> int:
    """The largest slab of at most ``slab_bytes`` (at least one unit) that holds whole rows of
    every size in ``row_bytes``: the fused kernel reads each row of a fact (one token's K or V,
    or their FP8 scales, for one layer) from one slab. With 3 KV heads of 64 (SmolLM2) a bf16
    row is 384 bytes, which no power-of-two slab holds whole, and every load took the PyTorch
    path."""
    unit = math.lcm(SLAB_ALIGN, *(row for row in row_bytes if row > 0))
    return max(unit, slab_bytes // unit * unit)


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
