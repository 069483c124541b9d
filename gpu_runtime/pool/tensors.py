"""Worker-side tensors of the tiered KV pool: a GPU slab arena, a pinned host arena, disk.

``TieredKVPool`` is the store the connector uses when KV budgets are configured. Where each fact
lives is decided by the torch-free ``ResidencyIndex``; this module only applies its decisions:
it packs a fact's KV into byte slabs, copies slabs between tiers in the order the index reports
(on a side stream on CUDA, so eviction copies overlap compute), and reads facts back. Every
fact is also on disk, so a miss in memory reloads it and a restart serves without re-encoding.
On a CPU-only machine the "GPU" arena is plain memory and the same code paths run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from itertools import chain
from pathlib import Path
from typing import cast

import numpy as np
import torch

from gpu_runtime.errors import TenantMismatchError
from gpu_runtime.pool.arena import Packing, PinnedFacts, SlabArena, pack, unpack
from gpu_runtime.pool.entries import Move, Tier, UnknownEntryError
from gpu_runtime.pool.index import ResidencyIndex
from gpu_runtime.pool.landing import Landings
from gpu_runtime.pool.metrics import PoolMetrics
from gpu_runtime.store.base import DurableKVStore
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.packed import PackedKVStore
from gpu_runtime.types import FactKey, TenantId


class TieredKVPool:
    """The connector's KV store with GPU and host budgets; same interface as InMemoryKVStore."""

    def __init__(
        self, index: ResidencyIndex, disk: DurableKVStore, gpu_slabs: int, host_slabs: int
    ) -> None:
        self.index = index
        self.slab_bytes = index.slab_bytes_per_slab()
        self.disk = disk
        self._gpu_slabs, self._host_slabs = gpu_slabs, host_slabs
        self._lock = threading.RLock()
        self._packings: dict[FactKey, Packing] = {}
        self._arenas: dict[Tier, SlabArena] = {}
        self.device = torch.device("cpu")
        self.metrics = PoolMetrics()
        self._stream: torch.cuda.Stream | None = None
        self._reclaimers: list[Callable[[], None]] = []
        self._landing: Landings[torch.cuda.Event] = Landings()  # GPU-tier copies in flight

    @classmethod
    def create(
        cls, disk: Path | DurableKVStore, gpu_bytes: int, host_bytes: int, slab_bytes: int,
        tenant_gpu_quota: int | None = None,
    ) -> TieredKVPool:  # fmt: skip
        index = ResidencyIndex(gpu_bytes, host_bytes, slab_bytes, tenant_gpu_quota)
        if isinstance(disk, Path):
            disk = PackedKVStore(disk)
        return cls(index, disk, gpu_bytes // slab_bytes, host_bytes // slab_bytes)

    def bind_device(self, device: torch.device) -> None:
        """Called by the worker once it knows where the KV cache lives."""
        with self._lock:
            self.device = device

    def _arena(self, tier: Tier) -> SlabArena:
        if tier not in self._arenas:
            slab = self.slab_bytes
            if tier is Tier.GPU:
                self._arenas[tier] = SlabArena(self._gpu_slabs, slab, self.device, pinned=False)
            else:
                pinned = self.device.type == "cuda"
                self._arenas[tier] = SlabArena(self._host_slabs, slab, torch.device("cpu"), pinned)
        return self._arenas[tier]

    def _apply(self, moves: list[Move] | tuple[Move, ...], *, join: bool = True) -> None:
        """In the order given: a later move may reuse slabs an earlier one vacated."""
        for move in moves:
            if move.dst_tier is Tier.DISK:
                continue  # the durable copy is already on disk
            packing = self._packings.get(move.key)
            if move.src_tier is Tier.DISK or packing is None:
                kv = self.disk.get(move.key)
                if kv is None:  # gone from the store (purged elsewhere) or found damaged
                    self._forget(move.key)
                    continue
                blob, packing = pack(kv)
                self._packings[move.key] = packing
                self._copy(move.dst_tier, move.dst_slabs, blob)
                continue
            self._on_side_stream(partial(self._move_slabs, move), join=join)

    def _forget(self, key: FactKey) -> None:
        """Drops an entry whose promotion found no durable copy: the slabs planned for it hold
        stale bytes (another fact's, maybe another tenant's), never this fact. A pinned entry
        leaves the index now and frees its slabs at its last unpin."""
        removed = self.index.remove(key.tenant, key)
        if removed is None or not removed.pins:
            self._packings.pop(key, None)
        self._landing.pop(key)

    def _move_slabs(self, move: Move) -> None:
        self._arena(move.dst_tier).copy_slabs(
            self._arena(move.src_tier), move.src_slabs, move.dst_slabs
        )
        if move.dst_tier is Tier.GPU and self._stream is not None:
            landed = torch.cuda.Event()  # type: ignore[no-untyped-call]
            landed.record(self._stream)
            self._landing.record(move.key, landed)

    def _copy(self, tier: Tier, slabs: tuple[int, ...], blob: torch.Tensor) -> None:
        self._on_side_stream(lambda: self._arena(tier).write(slabs, blob))

    def _on_side_stream(self, work: Callable[[], None], *, join: bool = True) -> None:
        """Evictions and promotions run off the compute stream; with ``join`` the caller's
        stream waits for them, else readers wait on the facts' ``_landing`` events."""
        if self.device.type != "cuda":
            work()
            return
        if self._stream is None:
            self._stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            work()
        if join:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)

    def _host_reads_safe(self) -> None:
        """CPU-side reads of pinned slabs must not race an eviction copy still in flight."""
        if self._stream is not None:
            self._stream.synchronize()

    # ---- store interface -----------------------------------------------------------------
    def put(self, tenant: TenantId, key: FactKey, kv: FactKV) -> None:
        self.put_many(tenant, [(key, kv)])

    def put_many(self, tenant: TenantId, items: Sequence[tuple[FactKey, FactKV]]) -> None:
        if any(key.tenant != tenant for key, _ in items):
            raise TenantMismatchError(f"a key of another tenant stored as {tenant.value!r}")
        self.disk.put_many(items)  # durable first, in one commit
        for key, kv in items:
            self._admit(tenant, key, kv)

    def _admit(self, tenant: TenantId, key: FactKey, kv: FactKV) -> None:
        """Into the memory tiers (its durable copy is already on disk)."""
        self.reclaim()
        # The arenas are made and written inside vLLM's inference mode (engine steps); callers
        # outside it (the runtime, tests) must touch them the same way.
        with self._lock, torch.inference_mode():
            blob, packing = pack(kv)
            placement = self.index.admit(tenant, key, packing.nbytes)
            self._apply(placement.moves)
            self._packings[key] = packing
            if placement.tier is not Tier.DISK:
                self._copy(placement.tier, placement.slabs, blob)

    def get(self, tenant: TenantId, key: FactKey) -> FactKV | None:
        started = time.perf_counter()
        with self._lock, torch.inference_mode():
            entry = self.index.lookup_for_use(tenant, key)
            if entry is None:
                kv = self.disk.get(key)  # a restart or another process: reload, re-admit
                if kv is None:
                    return None
                self._admit(tenant, key, kv)  # from disk: not rewritten
                entry = self.index.lookup(tenant, key)
                assert entry is not None
            found_on = entry.tier
            self._apply(self.index.pin(tenant, [key]))  # promote while in use
            try:
                entry = self.index.lookup(tenant, key)
                if entry is None:  # its durable copy was gone when the pin brought it back
                    kv = None
                elif entry.tier is Tier.DISK:
                    kv = self.disk.get(key)
                    if kv is None:
                        self._forget(key)
                else:
                    if entry.tier is Tier.HOST:
                        self._host_reads_safe()
                    landing = self._landing.pop(key)
                    if landing is not None and entry.tier is Tier.GPU:
                        torch.cuda.current_stream(self.device).wait_event(landing)
                    packing = self._packings[key]
                    kv = unpack(self._arena(entry.tier).read(entry.slabs, packing.nbytes), packing)
            finally:
                for freed in self.index.unpin(tenant, [key]):
                    self._packings.pop(freed.key, None)
        if kv is not None:
            self.metrics.loaded(found_on, 1, time.perf_counter() - started)
        return kv

    # ---- fused loader interface -----------------------------------------------------------
    ARENAS = (Tier.GPU, Tier.HOST)

    def arena_addresses(self) -> tuple[int, ...]:
        """Base addresses of the GPU and the (pinned) host arena, in ``ARENAS`` order."""
        with self._lock, torch.inference_mode():
            return tuple(self._arena(tier).data.data_ptr() for tier in self.ARENAS)

    def acquire(self, tenant: TenantId, keys: list[FactKey]) -> PinnedFacts | None:
        """Pins ``keys`` (distinct) where they are (disk-only facts are loaded into memory) and
        says where their slabs are; ``None`` (nothing pinned) if a fact is gone or cannot reach
        memory. The caller must ``release`` the same keys once its reads have completed."""
        started = time.perf_counter()
        with self._lock, torch.inference_mode():
            placements: Sequence[tuple[Tier, tuple[int, ...]] | None] | None
            placements = self.index.pin_in_memory(tenant, keys)  # the common case: one pass
            if placements is None:
                for key in self.index.missing(tenant, keys):
                    kv = self.disk.get(key)  # a restart or another process: reload, re-admit
                    if kv is None:
                        return None
                    self._admit(tenant, key, kv)  # from disk: not rewritten
                try:
                    self._apply(self.index.pin(tenant, keys, promote=False))
                except UnknownEntryError:
                    return None
                placements = self.index.placements(tenant, keys)
            pinned = self._pinned(keys, placements)
            if pinned is None:
                self.release(tenant, keys)
                return None
        elapsed = (time.perf_counter() - started) / max(len(keys), 1)
        on_host = int(pinned.arenas.sum())
        for tier, count in ((Tier.GPU, len(keys) - on_host), (Tier.HOST, on_host)):
            if count:
                self.metrics.loaded(tier, count, elapsed)
        return pinned

    def _pinned(
        self,
        keys: list[FactKey],
        placements: Sequence[tuple[Tier, tuple[int, ...]] | None],
    ) -> PinnedFacts | None:
        """Gathers pinned facts' arenas, slabs and positions (lock held); ``None`` if one of
        them is not in memory after all. Whole-request comprehensions, not a loop body per
        fact: this runs on the engine's critical path for every request."""
        packings = [self._packings.get(key) for key in keys]
        if any(p is None for p in packings) or any(
            placed is None or placed[0] is Tier.DISK for placed in placements
        ):
            return None
        placed = cast("list[tuple[Tier, tuple[int, ...]]]", placements)
        stored = cast("list[Packing]", packings)
        n = len(keys)
        slab_counts = np.fromiter((len(p[1]) for p in placed), np.int64, n)
        lengths = np.fromiter((p.shape[1] for p in stored), np.int64, n)
        landing = None
        if self._landing:  # promotions to the GPU tier in flight (prefetch)
            on_gpu = (key for key, p in zip(keys, placed, strict=True) if p[0] is Tier.GPU)
            landing = self._landing.wait_for(on_gpu)
        return PinnedFacts(
            keys=tuple(keys),
            arenas=np.fromiter((p[0] is Tier.HOST for p in placed), np.int64, n),
            n_tokens=lengths,
            n_layers=frozenset(p.shape[0] for p in stored),
            formats=frozenset((p.dtype, p.scaled) for p in stored),
            slab_rows=np.cumsum(slab_counts) - slab_counts,
            slabs=np.fromiter(chain.from_iterable(p[1] for p in placed), np.int64),
            position_rows=np.cumsum(lengths) - lengths,
            positions=np.concatenate([p.position_array for p in stored]),
            ready=() if landing is None else (landing,),
        )

    def add_reclaimer(self, reclaim: Callable[[], None]) -> None:
        """``reclaim()`` releases pins whose readers have finished; called before the pool
        evicts or demotes, so a finished request's pins never block eviction."""
        self._reclaimers.append(reclaim)

    def reclaim(self) -> None:
        """Releases the pins of finished reads now: before the pool plans evictions or moves,
        and from the engine loop while it is idle (so the next request does not pay for it)."""
        for release in self._reclaimers:
            release()

    def prefetch(self, tenant: TenantId, keys: list[FactKey]) -> None:
        """Starts promoting a request's facts to the GPU tier as soon as they are known (at
        retrieval), so the host->GPU copy overlaps everything before the forward. Asynchronous
        on CUDA: a reader waits on the fact's landing event, never on the whole pool."""
        self.reclaim()
        with self._lock, torch.inference_mode():
            self._apply(self.index.prefetch(tenant, keys), join=False)
            self._landing.sweep()  # landed: readers need not wait

    def release(self, tenant: TenantId, keys: list[FactKey]) -> None:
        with self._lock:
            for freed in self.index.unpin(tenant, keys):
                self._packings.pop(freed.key, None)

    def contains_all(self, tenant: TenantId, keys: Iterable[FactKey]) -> bool:
        return all(self.disk.exists(key) for key in self.index.missing(tenant, keys))

    def delete(self, tenant: TenantId, key: FactKey) -> bool:
        return self.delete_many(tenant, [key]) > 0

    def delete_many(self, tenant: TenantId, keys: Sequence[FactKey]) -> int:
        held = set()
        with self._lock:
            for key in keys:
                if self.index.remove(tenant, key) is not None:
                    held.add(key)
                self._packings.pop(key, None)
                self._landing.pop(key)
        held |= {key for key in keys if self.disk.exists(key)}
        self.disk.delete_many(tenant, keys)
        return len(held)

    def delete_tenant(self, tenant: TenantId) -> None:
        with self._lock:
            for entry in self.index.remove_tenant(tenant):
                self._packings.pop(entry.key, None)
        self.disk.delete_tenant(tenant)

    def keys(self, tenant: TenantId) -> list[FactKey]:
        return sorted(set(self.index.keys(tenant)) | set(self.disk.keys(tenant)))

    def demote(self, tenant: TenantId, keys: Iterable[FactKey], tier: Tier) -> None:
        self.reclaim()
        with self._lock, torch.inference_mode():
            self._apply(self.index.demote(tenant, keys, tier))
            if self.device.type == "cuda":
                torch.cuda.current_stream(self.device).synchronize()

    def stats(self, tenant: TenantId | None = None) -> dict[str, int]:
        return self.index.stats(tenant)
