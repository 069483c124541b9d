"""Scheduler-side residency index for per-tenant KV pools: GPU -> pinned host DRAM -> disk.

The index decides where each fact's KV lives and reports every decision as slab ids (a
``Placement`` for a new entry, ``Move`` s for entries that had to change tier); it never touches
tensors, so the scheduler runs it without torch and the worker applies what it reports, moves
strictly in the order given (a move may reuse slabs an earlier move in the list vacated).

Disk is unbounded and holds a durable copy of every entry, so the worker writes every admitted
entry to disk as well as to its placement; an entry's ``tier`` is the fastest tier holding it,
and a move to ``DISK`` just drops the memory copy.

Where an entry may go (slab pools, quotas, fair shares, LRU order) is the ``TierLedger``'s
(``pool.ledger``, with the eviction policy); this class holds the entries, their pins and uses,
and the public API.

``remove`` of a pinned entry does not refuse (the caller could only retry): the entry is marked
doomed, becomes invisible to lookups, keys and pins, keeps its slabs while an in-flight request
reads them, and is freed on its last unpin, which returns it so the worker can drop its KV.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from gpu_runtime.pool.entries import (
    MEMORY_TIERS,
    RANK,
    Entry,
    Move,
    Placement,
    Tier,
    UnknownEntryError,
    check_tenant,
    distinct_keys,
)
from gpu_runtime.pool.ledger import TierLedger
from gpu_runtime.types import FactKey, TenantId

_COUNTERS = ("gpu_evictions", "host_evictions", "gpu_hits", "host_hits", "disk_hits", "misses")


class ResidencyIndex(TierLedger):
    """Thread-safe map FactKey -> Entry with LRU eviction, per-tenant quotas and pinning."""

    def __init__(
        self,
        gpu_budget_bytes: int,
        host_budget_bytes: int,
        slab_bytes: int,
        tenant_gpu_quota_bytes: int | None = None,
        tenant_host_quota_bytes: int | None = None,
    ) -> None:
        super().__init__(gpu_budget_bytes, host_budget_bytes, slab_bytes,
                         tenant_gpu_quota_bytes, tenant_host_quota_bytes)  # fmt: skip
        self._lock = threading.Lock()
        self._tick = 0
        self._entries: dict[TenantId, dict[FactKey, Entry]] = {}

    # -- public API ------------------------------------------------------------------------------

    def slab_bytes_per_slab(self) -> int:
        return self._slab_bytes

    def admit(self, tenant: TenantId, key: FactKey, nbytes: int) -> Placement:
        """Places a new entry on the fastest tier with room; re-admitting a key is idempotent."""
        check_tenant(tenant, key)
        if nbytes <= 0:
            raise ValueError("nbytes must be positive")
        with self._lock:
            entry = self._entries.get(tenant, {}).get(key)
            if entry is not None:
                if entry.nbytes != nbytes:
                    raise ValueError(f"{key} already admitted with {entry.nbytes} bytes")
                entry.doomed = False  # re-admitted before its last unpin: keep it
                self._use(entry)
                return Placement(entry.tier, entry.slabs)
            entry = Entry(key, nbytes, Tier.DISK, last_use=self._next_tick())
            self._entries.setdefault(tenant, {})[key] = entry
            moves: list[Move] = []
            for tier in MEMORY_TIERS:
                if self._try_move(entry, tier, moves, record=False):
                    break
            return Placement(entry.tier, entry.slabs, tuple(moves))

    def touch(self, tenant: TenantId, key: FactKey) -> bool:
        """Marks the entry most recently used; False if the index does not hold it."""
        check_tenant(tenant, key)
        with self._lock:
            entry = self._live(tenant, key)
            if entry is not None:
                self._use(entry)
            return entry is not None

    def lookup(self, tenant: TenantId, key: FactKey) -> Entry | None:
        """A copy of the entry, without counting a use (for inspection)."""
        check_tenant(tenant, key)
        with self._lock:
            entry = self._live(tenant, key)
            return None if entry is None else replace(entry)

    def missing(self, tenant: TenantId, keys: Iterable[FactKey]) -> list[FactKey]:
        """The keys the index does not hold (one lock for a whole request's facts)."""
        wanted = distinct_keys(tenant, keys)
        with self._lock:
            held = self._entries.get(tenant, {})
            found = [held.get(key) for key in wanted]
            return [key for key, e in zip(wanted, found, strict=True) if e is None or e.doomed]

    def placements(
        self, tenant: TenantId, keys: Iterable[FactKey]
    ) -> list[tuple[Tier, tuple[int, ...]] | None]:
        """(tier, slabs) of each key, ``None`` where absent; no use is counted."""
        with self._lock:
            out: list[tuple[Tier, tuple[int, ...]] | None] = []
            for key in keys:
                check_tenant(tenant, key)
                entry = self._live(tenant, key)
                out.append(None if entry is None else (entry.tier, entry.slabs))
            return out

    def lookup_for_use(self, tenant: TenantId, key: FactKey) -> Entry | None:
        """Like ``lookup`` but counts a hit on the entry's tier (or a miss) and touches it."""
        check_tenant(tenant, key)
        with self._lock:
            entry = self._live(tenant, key)
            self._count_lookup(tenant, entry)
            if entry is None:
                return None
            self._use(entry)
            return replace(entry)

    def pin(self, tenant: TenantId, keys: Iterable[FactKey], *, promote: bool = True) -> list[Move]:
        """Pins entries for an in-flight request and promotes them as far towards GPU as fits.

        With ``promote=False`` entries already in memory stay where they are (the fused loader
        reads host-tier slabs in place); only disk entries are brought into memory.

        All or nothing: if any key is absent, ``UnknownEntryError`` is raised and nothing is
        pinned (hits and misses are still counted). An entry that cannot reach GPU (pinned
        entries or quotas in the way) stays pinned where it ends up; ``lookup`` tells where.
        """
        wanted = distinct_keys(tenant, keys)
        with self._lock:
            found: list[Entry] = []
            missing: list[FactKey] = []
            for key in wanted:
                entry = self._live(tenant, key)
                self._count_lookup(tenant, entry)
                if entry is None:
                    missing.append(key)
                else:
                    found.append(entry)
            if missing:
                raise UnknownEntryError(missing)
            for entry in found:  # pin all first so promoting one never evicts another
                entry.pins += 1
                self._use(entry)
            moves: list[Move] = []
            for entry in found:
                if not promote and entry.tier is not Tier.DISK:
                    continue
                for tier in MEMORY_TIERS:
                    if RANK[tier] >= RANK[entry.tier] or self._try_move(entry, tier, moves):
                        break
            return moves

    def pin_in_memory(
        self, tenant: TenantId, keys: Iterable[FactKey]
    ) -> list[tuple[Tier, tuple[int, ...]]] | None:
        """The serving fast path of ``pin(promote=False)`` + ``placements``, in one pass: if
        every key is held on the GPU or host tier, pins them all where they are and returns
        (tier, slabs) per key; otherwise ``None`` and nothing is pinned or counted."""
        wanted = distinct_keys(tenant, keys)
        with self._lock:
            held = self._entries.get(tenant, {})
            found: list[Entry] = []
            for key in wanted:
                entry = held.get(key)
                if entry is None or entry.doomed or entry.tier is Tier.DISK:
                    return None
                found.append(entry)
            # Per request, not per fact: counters once per tier, one tick per entry.
            tick, on_gpu = self._tick, 0
            for entry in found:
                tick += 1
                entry.last_use = tick
                entry.pins += 1
                on_gpu += entry.tier is Tier.GPU
            self._tick = tick
            for tier, count in ((Tier.GPU, on_gpu), (Tier.HOST, len(found) - on_gpu)):
                if count:
                    self._counters[(tenant, f"{tier}_hits")] += count
            return [(entry.tier, entry.slabs) for entry in found]

    def prefetch(self, tenant: TenantId, keys: Iterable[FactKey]) -> list[Move]:
        """Promotes unpinned entries towards GPU ahead of a request (no pin, no hit counted).

        The entries are marked used first, as the request is about to use them: otherwise
        an entry promoted with an old last use is the GPU tier's next victim, and promoting
        the request's next fact would evict it again. Pinned entries stay where they are: an
        in-flight request may be reading their slabs. Absent keys are skipped; the request
        itself reloads them from disk.
        """
        wanted = distinct_keys(tenant, keys)
        with self._lock:
            moves: list[Move] = []
            held = self._entries.get(tenant, {})
            found = [e for e in (held.get(key) for key in wanted) if e is not None and not e.doomed]
            for entry in found:
                self._use(entry)
            for entry in found:
                if entry.pins or entry.tier is Tier.GPU:
                    continue
                for tier in MEMORY_TIERS:
                    if RANK[tier] >= RANK[entry.tier] or self._try_move(entry, tier, moves):
                        break
            return moves

    def demote(self, tenant: TenantId, keys: Iterable[FactKey], tier: Tier) -> list[Move]:
        """Moves unpinned entries down to ``tier`` (HOST or DISK), e.g. to measure offload cost
        or to make room ahead of a known burst; pinned or already slower entries stay."""
        wanted = distinct_keys(tenant, keys)
        with self._lock:
            moves: list[Move] = []
            for key in wanted:
                entry = self._live(tenant, key)
                if entry is None or entry.pins or RANK[entry.tier] >= RANK[tier]:
                    continue
                if tier is Tier.DISK or not self._try_move(entry, tier, moves):
                    moves.append(Move(key, entry.tier, Tier.DISK, entry.slabs, ()))
                    self._release(entry)
            return moves

    def unpin(self, tenant: TenantId, keys: Iterable[FactKey]) -> list[Entry]:
        """Releases one pin per key; returns the doomed entries this freed (drop their KV)."""
        wanted = distinct_keys(tenant, keys)
        with self._lock:
            held = self._entries.get(tenant, {})
            found = [held.get(key) for key in wanted]
            if not all(entry is not None and entry.pins for entry in found):
                raise UnknownEntryError(
                    [key for key in wanted if key not in held or not held[key].pins]
                )
            freed: list[Entry] = []
            for entry in found:
                assert entry is not None
                entry.pins -= 1
                if entry.doomed and not entry.pins:
                    freed.append(self._drop(entry))
            return freed

    def remove(self, tenant: TenantId, key: FactKey) -> Entry | None:
        """Removes an entry; returns it so the worker frees its KV (unless it comes back doomed)."""
        check_tenant(tenant, key)
        with self._lock:
            entry = self._live(tenant, key)
            return None if entry is None else self._remove(entry)

    def remove_tenant(self, tenant: TenantId) -> list[Entry]:
        """Removes all of a tenant's entries (pinned ones as in ``remove``), in key order."""
        with self._lock:
            held = self._entries.get(tenant, {})
            return [self._remove(held[key]) for key in sorted(held) if not held[key].doomed]

    def keys(self, tenant: TenantId) -> list[FactKey]:
        with self._lock:
            return sorted(k for k, e in self._entries.get(tenant, {}).items() if not e.doomed)

    def stats(self, tenant: TenantId | None = None) -> dict[str, int]:
        """Per-tier entry counts, bytes (``*_bytes``: as admitted; ``*_slab_bytes``: as held),
        pinned entries and counters, for one tenant or (with pool capacities) for all."""
        with self._lock:
            tenants = list(self._entries) if tenant is None else [tenant]
            entries = [e for t in tenants for e in self._entries.get(t, {}).values()]
            out: dict[str, int] = {"entries": len(entries)}
            for tier in Tier:
                on_tier = [e for e in entries if e.tier is tier]
                out[f"{tier}_entries"] = len(on_tier)
                out[f"{tier}_bytes"] = sum(e.nbytes for e in on_tier)
            for tier, pool in self._pools.items():
                held = sum(len(e.slabs) for e in entries if e.tier is tier)
                out[f"{tier}_slab_bytes"] = held * pool.slab_bytes
                if tenant is None:
                    out[f"{tier}_capacity_bytes"] = pool.capacity_bytes
                    out[f"{tier}_free_bytes"] = pool.free_bytes
            out["pinned"] = sum(1 for e in entries if e.pins)
            counts: Counter[str] = Counter()
            for (who, name), n in self._counters.items():
                counts[name] += n if tenant is None or who == tenant else 0
            out.update({name: counts[name] for name in _COUNTERS})
            out["evictions"] = out["gpu_evictions"] + out["host_evictions"]
            return out

    # -- internals (called with the lock held)---------------------------------------------------

    def _next_tick(self) -> int:
        self._tick += 1
        return self._tick

    def _use(self, entry: Entry) -> None:
        entry.last_use = self._next_tick()

    def _live(self, tenant: TenantId, key: FactKey) -> Entry | None:
        entry = self._entries.get(tenant, {}).get(key)
        return None if entry is None or entry.doomed else entry

    def _count_lookup(self, tenant: TenantId, entry: Entry | None) -> None:
        self._counters[(tenant, "misses" if entry is None else f"{entry.tier}_hits")] += 1

    def _remove(self, entry: Entry) -> Entry:
        if entry.pins:
            entry.doomed = True
            return replace(entry)
        return self._drop(entry)

    def _drop(self, entry: Entry) -> Entry:
        """Forgets an unpinned entry; returns its last state so the worker can free its KV."""
        snapshot = replace(entry)
        self._release(entry)
        tenant = entry.key.tenant
        del self._entries[tenant][entry.key]
        if not self._entries[tenant]:
            del self._entries[tenant]
        return snapshot
