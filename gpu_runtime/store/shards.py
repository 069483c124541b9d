"""Tensor parallelism: a worker rank holds its KV heads' slice of a fact; the disk, the whole.

Under vLLM's tensor parallelism a rank's paged cache holds only its share of the KV heads
(contiguous, in order; with fewer KV heads than ranks each head is replicated on
``size // heads`` consecutive ranks). A rank captures, pools and injects its slice only. The
durable store keeps every fact whole, with all its heads, whatever the TP degree that wrote it:
a fact encoded at TP=1 loads at TP=3 (each rank cuts its heads on load) and one encoded at TP=3
loads at TP=1, so changing the deployment never forces a re-encode, and the runtime, the catalog
and other replicas read the store exactly as at TP=1.

``ShardedDiskStore`` wraps the durable store of one rank. Its writes are collective: every rank
calls ``put_many`` with its slices of the same facts in the same order (the worker halves store a
step's finished captures together), the slices meet on rank 0 through ``exchange`` (vLLM's CPU
process group), and rank 0 joins and writes them. Rank 0 alone mutates the disk (writes, purges);
the runtime's out-of-band purges reach every rank, so rank 0's has run when a purge returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from gpu_runtime.errors import RuntimeErrorBase
from gpu_runtime.store.base import DurableKVStore
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId

# This rank's bytes in; on rank 0 every rank's bytes (same length, rank order), else None.
Exchange = Callable[[torch.Tensor], list[torch.Tensor] | None]


class ShardMismatchError(RuntimeErrorBase):
    """A stored fact or a gathered slice does not have the heads this deployment expects."""


@dataclass(frozen=True)
class HeadShard:
    rank: int
    size: int  # the tensor-parallel degree
    total_heads: int  # the model's KV heads

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} outside a TP degree of {self.size}")
        big, small = max(self.size, self.total_heads), min(self.size, self.total_heads)
        if big % small:
            raise ValueError(f"{self.total_heads} KV heads cannot be split over {self.size} ranks")

    def heads_of(self, rank: int) -> range:
        """The KV heads ``rank``'s cache holds, as vLLM splits them."""
        if self.total_heads >= self.size:
            per = self.total_heads // self.size
            return range(rank * per, (rank + 1) * per)
        head = rank // (self.size // self.total_heads)
        return range(head, head + 1)

    @property
    def heads(self) -> range:
        return self.heads_of(self.rank)

    @property
    def writers(self) -> list[int]:
        """One rank per distinct slice (the first holding it), in head order."""
        return sorted({self.heads_of(r).start: r for r in reversed(range(self.size))}.values())


def cut(kv: FactKV, heads: range) -> FactKV:
    """The fact's slice of ``heads`` (FP8 scales are per head: sliced alongside)."""
    span = slice(heads.start, heads.stop)
    ks, vs = kv.key_scales, kv.value_scales
    return FactKV.build(
        kv.keys[:, :, span],  # [layers, n_tokens, heads, head_dim]
        kv.values[:, :, span],
        kv.positions,
        ks[:, :, span] if ks is not None else None,  # [layers, n_tokens, heads]
        vs[:, :, span] if vs is not None else None,
    )


def join(slices: Sequence[FactKV]) -> FactKV:
    """Slices of one fact, in head order, as the whole fact."""
    first = slices[0]
    if any(not torch.equal(s.positions, first.positions) for s in slices):
        raise ShardMismatchError("slices of one fact captured at different positions")
    scaled = first.key_scales is not None

    def cat(name: str) -> torch.Tensor | None:
        parts = [getattr(s, name) for s in slices]
        return torch.cat(parts, dim=2) if scaled or name in ("keys", "values") else None

    keys, values = cat("keys"), cat("values")
    assert keys is not None and values is not None
    return FactKV.build(keys, values, first.positions, cat("key_scales"), cat("value_scales"))


def _as_bytes(tensors: Iterable[torch.Tensor]) -> torch.Tensor:
    """[sum of nbytes] uint8, on the CPU (gloo gathers host memory)."""
    flat = [t.detach().contiguous().cpu().reshape(-1).view(torch.uint8) for t in tensors]
    return torch.cat(flat) if flat else torch.empty(0, dtype=torch.uint8)


def _from_bytes(blob: torch.Tensor, like: FactKV) -> FactKV:
    """``like``'s tensors (shapes and dtypes) read back out of another rank's ``blob``."""
    out, offset = [], 0
    for t in like.tensors:
        n = t.numel() * t.element_size()
        out.append(blob[offset : offset + n].view(t.dtype).reshape(t.shape))
        offset += n
    return FactKV.build(*out)  # keys, values, positions[, key and value scales]


class ShardedDiskStore:
    """One rank's view of the durable store: whole facts on disk, this rank's heads in memory."""

    def __init__(self, inner: DurableKVStore, shard: HeadShard, exchange: Exchange) -> None:
        self.inner = inner
        self.shard = shard
        self._exchange = exchange

    @property
    def writer(self) -> bool:
        return self.shard.rank == 0

    def put(self, key: FactKey, kv: FactKV) -> int:
        return self.put_many([(key, kv)])[0]

    def put_many(self, items: Iterable[tuple[FactKey, FactKV]]) -> list[int]:
        """Collective: this rank's slices of the step's facts; rank 0 writes them whole and
        returns their sizes on disk, the other ranks their slices' bytes."""
        batch = list(items)
        for key, kv in batch:
            if kv.keys.shape[2] != len(self.shard.heads):
                raise ShardMismatchError(f"{key}: {kv.keys.shape[2]} heads, this rank holds "
                                         f"{len(self.shard.heads)}")  # fmt: skip
        gathered = self._exchange(_as_bytes(t for _, kv in batch for t in kv.tensors))
        if gathered is None:
            return [kv.nbytes for _, kv in batch]
        whole = []
        per_rank = [self._unpack(blob, batch) for blob in gathered]  # [rank][fact]
        for i, (key, _) in enumerate(batch):
            whole.append((key, join([per_rank[r][i] for r in self.shard.writers])))
        return self.inner.put_many(whole)

    @staticmethod
    def _unpack(blob: torch.Tensor, batch: list[tuple[FactKey, FactKV]]) -> list[FactKV]:
        facts, offset = [], 0
        for _, kv in batch:
            n = kv.nbytes
            facts.append(_from_bytes(blob[offset : offset + n], kv))
            offset += n
        return facts

    def get(self, key: FactKey) -> FactKV | None:
        kv = self.inner.get(key)
        if kv is None:
            return None
        if kv.keys.shape[2] != self.shard.total_heads:
            raise ShardMismatchError(f"{key} is stored with {kv.keys.shape[2]} KV heads, "
                                     f"the model has {self.shard.total_heads}")  # fmt: skip
        return cut(kv, self.shard.heads)

    def exists(self, key: FactKey) -> bool:
        return self.inner.exists(key)

    def size(self, key: FactKey) -> int | None:
        return self.inner.size(key)

    def delete(self, key: FactKey) -> bool:
        return self.inner.delete(key) if self.writer else self.inner.exists(key)

    def delete_many(self, tenant: TenantId, keys: Iterable[FactKey]) -> int:
        wanted = list(keys)
        if self.writer:
            return self.inner.delete_many(tenant, wanted)
        return sum(self.inner.exists(k) for k in wanted)

    def delete_tenant(self, tenant: TenantId) -> None:
        if self.writer:
            self.inner.delete_tenant(tenant)

    def keys(self, tenant: TenantId) -> list[FactKey]:
        return self.inner.keys(tenant)

    def usage(self, tenant: TenantId | None = None) -> dict[str, int]:
        return self.inner.usage(tenant)
