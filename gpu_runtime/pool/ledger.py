"""Per memory tier (GPU, HOST): the slab pools, per-tenant quotas and usage, and LRU order; and
moving an entry between tiers under the eviction policy. Torch-free, as the whole index.

Policy, per memory tier (GPU, then HOST), when an entry of tenant ``t`` needs ``n`` slabs:

* quota: if ``t`` would exceed its per-tier quota, only ``t``'s own least recently used unpinned
  entries on that tier are evicted, so a tenant at its quota only ever displaces itself;
* capacity: then the globally least recently used unpinned entries are evicted until ``n`` slabs
  are free, except that while ``t`` would hold more than its fair share (tier capacity divided
  by the tenants holding slabs there, ``t`` included) no other tenant is pushed below its fair
  share: one tenant cannot evict everyone;
* entries are never evicted while pinned, and nothing is evicted unless the whole plan fits.

GPU evictions are demoted to HOST under the same rules (for the evicted entry's tenant); HOST
evictions drop to DISK. Quotas and fair shares count slabs, i.e. bytes rounded up to slabs.
LRU order comes from an integer tick, not time, so the index is deterministic; each memory tier
keeps its entries in that order in an ``LruHeap`` (``pool.lru``), and each tenant's share of
the tier in one more, so planning room walks only as far into the order as it needs instead of
sorting the tier.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator, Iterator
from contextlib import closing

from gpu_runtime.pool.entries import MEMORY_TIERS, Entry, Move, Tier
from gpu_runtime.pool.lru import LruHeap, place
from gpu_runtime.pool.slabs import SlabAllocator
from gpu_runtime.types import TenantId


def _quota_slabs(quota_bytes: int | None, slab_bytes: int) -> int | None:
    if quota_bytes is None:
        return None
    if quota_bytes < 0:
        raise ValueError("quotas must be non-negative")
    return quota_bytes // slab_bytes


class TierLedger:
    """The memory tiers' bookkeeping; ``ResidencyIndex`` calls it with its lock held."""

    def __init__(
        self,
        gpu_budget_bytes: int,
        host_budget_bytes: int,
        slab_bytes: int,
        tenant_gpu_quota_bytes: int | None = None,
        tenant_host_quota_bytes: int | None = None,
    ) -> None:
        self._slab_bytes = slab_bytes
        self._pools = {
            Tier.GPU: SlabAllocator(gpu_budget_bytes, slab_bytes),
            Tier.HOST: SlabAllocator(host_budget_bytes, slab_bytes),
        }
        self._quota = {
            Tier.GPU: _quota_slabs(tenant_gpu_quota_bytes, slab_bytes),
            Tier.HOST: _quota_slabs(tenant_host_quota_bytes, slab_bytes),
        }
        self._lru: dict[Tier, LruHeap] = {t: LruHeap() for t in MEMORY_TIERS}
        # Each tenant's entries per tier too: a tenant at its quota evicts its own LRU entries,
        # found without walking everyone else's.
        self._own_lru: dict[Tier, dict[TenantId, LruHeap]] = {t: {} for t in MEMORY_TIERS}
        self._used: dict[Tier, Counter[TenantId]] = {t: Counter() for t in MEMORY_TIERS}
        self._counters: Counter[tuple[TenantId, str]] = Counter()

    def _plan_room(self, tier: Tier, tenant: TenantId, need: int) -> list[Entry] | None:
        """The entries to evict from ``tier`` so ``need`` slabs fit for ``tenant`` (module doc)."""
        pool, used, quota = self._pools[tier], self._used[tier], self._quota[tier]
        if need > pool.capacity_slabs or (quota is not None and need > quota):
            return None
        own = used[tenant]
        if pool.free_slabs >= need and (quota is None or own + need <= quota):
            return []
        with (
            closing(self._oldest_first(tier, tenant)) as own_lru,
            closing(self._oldest_first(tier)) as lru,
        ):
            return self._choose_victims(tier, tenant, need, own_lru, lru)

    def _oldest_first(
        self, tier: Tier, tenant: TenantId | None = None
    ) -> Generator[Entry, None, None]:
        """The tier's unpinned entries (only ``tenant``'s, if given), least recently used
        first, lazily."""
        heap = self._lru[tier] if tenant is None else self._own_lru[tier].get(tenant, LruHeap())
        with closing(heap.walk()) as walk:
            for entry in walk:
                assert isinstance(entry, Entry)
                if not entry.pins:
                    yield entry

    def _choose_victims(
        self,
        tier: Tier,
        tenant: TenantId,
        need: int,
        own_lru: Iterator[Entry],
        lru: Iterator[Entry],
    ) -> list[Entry] | None:
        """``_plan_room``'s choice: first the tenant's own LRU entries down to its quota, then
        the tier's LRU entries until the need fits (fair shares permitting)."""
        pool, used, quota = self._pools[tier], self._used[tier], self._quota[tier]
        own = used[tenant]
        victims: list[Entry] = []
        freed: Counter[TenantId] = Counter()
        if quota is not None:  # (the walk starts only when it is needed)
            for entry in own_lru:
                if own - freed[tenant] + need <= quota:
                    break
                victims.append(entry)
                freed[tenant] += len(entry.slabs)
            if own - freed[tenant] + need > quota:
                return None
        fair = pool.capacity_slabs // len({t for t, n in used.items() if n > 0} | {tenant})
        free = pool.free_slabs + freed.total()
        chosen = {id(e) for e in victims}
        for entry in lru:
            if free >= need:
                break
            owner, size = entry.key.tenant, len(entry.slabs)
            if id(entry) in chosen:
                continue
            over_share = own - freed[tenant] + need > fair
            if owner != tenant and over_share and used[owner] - freed[owner] - size < fair:
                continue  # the caller is over its share: never push another tenant below its own
            victims.append(entry)
            freed[owner] += size
            free += size
        return victims if free >= need else None

    def _try_move(self, entry: Entry, dst: Tier, moves: list[Move], *, record: bool = True) -> bool:
        """Puts ``entry`` on memory tier ``dst``, evicting as policy allows; False if it can't."""
        victims = self._plan_room(dst, entry.key.tenant, self._pools[dst].slabs_for(entry.nbytes))
        if victims is None:
            return False
        for victim in victims:
            self._evict(victim, moves)
        slabs = self._pools[dst].allocate(entry.nbytes)
        src, src_slabs = entry.tier, entry.slabs
        self._release(entry)
        entry.tier, entry.slabs = dst, slabs
        place(entry)
        self._lru[dst].add(entry)
        self._own_lru[dst].setdefault(entry.key.tenant, LruHeap()).add(entry)
        self._used[dst][entry.key.tenant] += len(slabs)
        if record:
            moves.append(Move(entry.key, src, dst, src_slabs, slabs))
        return True

    def _evict(self, victim: Entry, moves: list[Move]) -> None:
        """Demotes one tier: GPU -> HOST if HOST has room for it, else (and HOST ->) DISK."""
        src = victim.tier
        self._counters[(victim.key.tenant, f"{src}_evictions")] += 1
        if src is Tier.GPU and self._try_move(victim, Tier.HOST, moves):
            return
        moves.append(Move(victim.key, src, Tier.DISK, victim.slabs, ()))
        self._release(victim)

    def _release(self, entry: Entry) -> None:
        """Frees the entry's memory slabs, leaving it on DISK only."""
        if entry.tier in self._pools:
            self._pools[entry.tier].free(entry.slabs)
            self._lru[entry.tier].remove(entry)
            own = self._own_lru[entry.tier]
            own[entry.key.tenant].remove(entry)
            if not own[entry.key.tenant]:
                del own[entry.key.tenant]
            used = self._used[entry.tier]
            used[entry.key.tenant] -= len(entry.slabs)
            if not used[entry.key.tenant]:
                del used[entry.key.tenant]
        entry.tier, entry.slabs = Tier.DISK, ()
