"""The residency index: slabs, LRU, quotas and fair shares, pinning, demotion and promotion.

A fake worker (``Worker``) replays every placement and move the index reports onto a map of
``(tier, slab) -> key`` and checks each step is legal, so the tests also prove the reported moves
are enough for the worker to track where every entry's KV is.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest

from gpu_runtime.errors import TenantMismatchError
from gpu_runtime.pool.entries import (
    Entry,
    Move,
    Placement,
    Tier,
    UnknownEntryError,
)
from gpu_runtime.pool.index import ResidencyIndex
from gpu_runtime.pool.slabs import OutOfSlabsError, SlabAllocator
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 2, 1)
SLAB = 100
A, B, C = TenantId("a"), TenantId("b"), TenantId("c")
_RANK = {Tier.GPU: 0, Tier.HOST: 1, Tier.DISK: 2}


def k(tenant: TenantId, name: str) -> FactKey:
    return FactKey.for_fact(tenant, name, 1, CFG)


def index(
    gpu: int,
    host: int,
    tenant_gpu_quota_bytes: int | None = None,
    tenant_host_quota_bytes: int | None = None,
) -> ResidencyIndex:
    """An index of ``gpu`` and ``host`` slabs; the quotas are given in slabs too."""
    gpu_quota = None if tenant_gpu_quota_bytes is None else tenant_gpu_quota_bytes * SLAB
    host_quota = None if tenant_host_quota_bytes is None else tenant_host_quota_bytes * SLAB
    return ResidencyIndex(gpu * SLAB, host * SLAB, SLAB, gpu_quota, host_quota)


class Worker:
    """Replays the index's reports onto slab slots, asserting every step is legal."""

    def __init__(self) -> None:
        self.slots: dict[tuple[Tier, int], FactKey] = {}

    def apply(self, moves: list[Move] | tuple[Move, ...]) -> None:
        for move in moves:
            assert move.src_tier != move.dst_tier
            for slab in move.src_slabs:
                assert self.slots.pop((move.src_tier, slab)) == move.key
            self._fill(move.dst_tier, move.dst_slabs, move.key)

    def place(self, key: FactKey, placement: Placement) -> None:
        self.apply(placement.moves)
        self._fill(placement.tier, placement.slabs, key)

    def free(self, entry: Entry) -> None:
        for slab in entry.slabs:
            assert self.slots.pop((entry.tier, slab)) == entry.key

    def _fill(self, tier: Tier, slabs: tuple[int, ...], key: FactKey) -> None:
        assert (tier is Tier.DISK) == (not slabs)
        for slab in slabs:
            assert (tier, slab) not in self.slots
            self.slots[(tier, slab)] = key

    def matches(
        self, idx: ResidencyIndex, tenants: list[TenantId], ignore: set[FactKey] | None = None
    ) -> None:
        """The slots hold exactly what the index says (``ignore``: doomed keys it hides)."""
        expected: dict[tuple[Tier, int], FactKey] = {}
        for tenant in tenants:
            for key in idx.keys(tenant):
                entry = idx.lookup(tenant, key)
                assert entry is not None
                expected.update({(entry.tier, slab): key for slab in entry.slabs})
        held = {slot: key for slot, key in self.slots.items() if key not in (ignore or set())}
        assert held == expected


def tier_of(idx: ResidencyIndex, key: FactKey) -> Tier:
    entry = idx.lookup(key.tenant, key)
    assert entry is not None
    return entry.tier


# -- slab allocator --------------------------------------------------------------------------


def test_slab_allocator_rounds_up_reuses_and_reports() -> None:
    pool = SlabAllocator(capacity_bytes=1050, slab_bytes=100)  # the 50-byte tail is unused
    assert pool.capacity_slabs == 10 and pool.capacity_bytes == 1000
    assert [pool.slabs_for(n) for n in (0, 1, 100, 101, 250)] == [0, 1, 1, 2, 3]
    first, second = pool.allocate(250), pool.allocate(100)
    assert first == (0, 1, 2) and second == (3,)
    assert (pool.used_slabs, pool.free_slabs, pool.used_bytes, pool.free_bytes) == (4, 6, 400, 600)
    pool.free([0, 2])
    assert pool.allocate(300) == (0, 2, 4)  # not contiguous: freed holes are reused first
    with pytest.raises(ValueError, match="not allocated"):
        pool.free([3, 3])
    with pytest.raises(ValueError, match="not allocated"):
        pool.free([9])
    assert pool.used_slabs == 5  # a refused free changes nothing
    with pytest.raises(OutOfSlabsError):
        pool.allocate(501)
    with pytest.raises(ValueError):
        SlabAllocator(100, 0)


# -- placement, LRU, demotion ----------------------------------------------------------------


def test_lru_order_decides_the_victim() -> None:
    idx = index(gpu=3, host=0)
    worker = Worker()
    for name in ("x", "y", "z"):
        placement = idx.admit(A, k(A, name), SLAB)
        assert placement.tier is Tier.GPU and placement.moves == ()
        worker.place(k(A, name), placement)
    assert idx.touch(A, k(A, "x"))  # x is now the most recently used
    placement = idx.admit(A, k(A, "w"), SLAB)
    assert [(m.key, m.src_tier, m.dst_tier) for m in placement.moves] == [
        (k(A, "y"), Tier.GPU, Tier.DISK)
    ]
    worker.place(k(A, "w"), placement)
    assert placement.slabs == placement.moves[0].src_slabs  # the victim's slab is reused
    assert idx.lookup_for_use(A, k(A, "z")) is not None  # a use also refreshes
    placement = idx.admit(A, k(A, "v"), SLAB)
    assert [m.key for m in placement.moves] == [k(A, "x")]
    worker.place(k(A, "v"), placement)
    worker.matches(idx, [A])
    assert not idx.touch(A, k(A, "missing"))


def test_demotion_chain_gpu_host_disk_reports_moves_in_order() -> None:
    idx = index(gpu=2, host=2)
    worker = Worker()
    for name in ("k1", "k2", "k3", "k4"):
        worker.place(k(A, name), idx.admit(A, k(A, name), SLAB))
    assert [tier_of(idx, k(A, n)) for n in ("k1", "k2", "k3", "k4")] == [
        Tier.HOST,
        Tier.HOST,
        Tier.GPU,
        Tier.GPU,
    ]
    placement = idx.admit(A, k(A, "k5"), SLAB)
    # k3 leaves GPU for HOST, which first has to drop its LRU entry k1 to disk
    assert [(m.key, m.src_tier, m.dst_tier) for m in placement.moves] == [
        (k(A, "k1"), Tier.HOST, Tier.DISK),
        (k(A, "k3"), Tier.GPU, Tier.HOST),
    ]
    drop, demote = placement.moves
    assert drop.dst_slabs == () and demote.dst_slabs == drop.src_slabs
    assert placement.tier is Tier.GPU and placement.slabs == demote.src_slabs
    worker.place(k(A, "k5"), placement)
    worker.matches(idx, [A])
    stats = idx.stats()
    assert (stats["gpu_evictions"], stats["host_evictions"], stats["evictions"]) == (3, 1, 4)
    assert (stats["gpu_entries"], stats["host_entries"], stats["disk_entries"]) == (2, 2, 1)


def test_entries_span_slabs_and_oversized_entries_fall_back() -> None:
    idx = index(gpu=4, host=6)
    big = idx.admit(A, k(A, "big"), 250)
    assert big.tier is Tier.GPU and len(big.slabs) == 3
    huge = idx.admit(A, k(A, "huge"), 501)  # more than the whole GPU pool
    assert huge.tier is Tier.HOST and len(huge.slabs) == 6 and huge.moves == ()
    assert idx.admit(A, k(A, "giant"), 10_000).tier is Tier.DISK
    stats = idx.stats(A)
    assert (stats["gpu_bytes"], stats["gpu_slab_bytes"]) == (250, 300)
    assert (stats["host_bytes"], stats["disk_bytes"], stats["entries"]) == (501, 10_000, 3)
    glob = idx.stats()
    assert (glob["gpu_capacity_bytes"], glob["gpu_free_bytes"], glob["host_free_bytes"]) == (
        400,
        100,
        0,
    )


def test_global_budget_is_never_exceeded() -> None:
    idx = index(gpu=5, host=3)
    for i in range(20):
        idx.admit(A if i % 2 else B, k(A if i % 2 else B, f"f{i}"), SLAB * (1 + i % 3))
        stats = idx.stats()
        assert stats["gpu_slab_bytes"] <= 5 * SLAB and stats["host_slab_bytes"] <= 3 * SLAB
        assert stats["gpu_free_bytes"] + stats["gpu_slab_bytes"] == 5 * SLAB


def test_admit_is_idempotent_and_validates() -> None:
    idx = index(gpu=2, host=0)
    first = idx.admit(A, k(A, "x"), SLAB)
    again = idx.admit(A, k(A, "x"), SLAB)
    assert (again.tier, again.slabs, again.moves) == (first.tier, first.slabs, ())
    with pytest.raises(ValueError, match="already admitted"):
        idx.admit(A, k(A, "x"), 2 * SLAB)
    with pytest.raises(ValueError):
        idx.admit(A, k(A, "y"), 0)
    assert idx.keys(A) == [k(A, "x")]


# -- quotas and fair shares ------------------------------------------------------------------


def test_tenant_at_quota_evicts_only_its_own_lru() -> None:
    idx = index(gpu=8, host=8, tenant_gpu_quota_bytes=4)
    for i in range(4):  # B's entries are the globally least recently used
        idx.admit(B, k(B, f"b{i}"), SLAB)
    for i in range(4):
        idx.admit(A, k(A, f"a{i}"), SLAB)
    placement = idx.admit(A, k(A, "a4"), SLAB)
    assert placement.tier is Tier.GPU
    assert [(m.key, m.dst_tier) for m in placement.moves] == [(k(A, "a0"), Tier.HOST)]
    assert all(tier_of(idx, k(B, f"b{i}")) is Tier.GPU for i in range(4))
    assert idx.stats(A)["gpu_slab_bytes"] == 4 * SLAB and idx.stats(B)["gpu_evictions"] == 0


def test_tenant_over_quota_with_everything_pinned_goes_to_host() -> None:
    idx = index(gpu=8, host=8, tenant_gpu_quota_bytes=2, tenant_host_quota_bytes=1)
    for name in ("a0", "a1"):
        idx.admit(A, k(A, name), SLAB)
    idx.pin(A, [k(A, "a0"), k(A, "a1")])
    assert idx.admit(A, k(A, "a2"), SLAB).tier is Tier.HOST  # GPU has room, A's quota has not
    placement = idx.admit(A, k(A, "a3"), SLAB)  # host quota: A's own LRU host entry drops
    assert placement.tier is Tier.HOST
    assert [(m.key, m.src_tier, m.dst_tier) for m in placement.moves] == [
        (k(A, "a2"), Tier.HOST, Tier.DISK)
    ]
    assert idx.admit(A, k(A, "a4"), 3 * SLAB).tier is Tier.DISK  # bigger than both quotas


def test_tenant_over_its_fair_share_cannot_evict_other_tenants() -> None:
    idx = index(gpu=6, host=0)  # no explicit quotas: fair share is 6 slabs / active tenants
    for tenant in (B, C):
        for i in range(2):
            idx.admit(tenant, k(tenant, f"{tenant.value}{i}"), SLAB)
    for i in range(6):  # A grabs the free slabs, then can only recycle its own
        idx.admit(A, k(A, f"a{i}"), SLAB)
    for tenant in (B, C):
        assert all(tier_of(idx, k(tenant, f"{tenant.value}{i}")) is Tier.GPU for i in range(2))
        assert idx.stats(tenant)["evictions"] == 0
    assert idx.stats(A)["gpu_entries"] == 2 and idx.stats(A)["evictions"] == 4
    # A tenant with everything pinned cannot take another's share either: it goes to DISK.
    idx.pin(A, [k(A, "a4"), k(A, "a5")])
    assert idx.admit(A, k(A, "a6"), SLAB).tier is Tier.DISK


def test_tenant_under_its_fair_share_evicts_the_global_lru() -> None:
    idx = index(gpu=4, host=0)
    for i in range(3):
        idx.admit(A, k(A, f"a{i}"), SLAB)
    idx.admit(B, k(B, "b0"), SLAB)
    placement = idx.admit(B, k(B, "b1"), SLAB)  # B ends at 2 = its fair share of 4 slabs
    assert [m.key for m in placement.moves] == [k(A, "a0")]
    placement = idx.admit(B, k(B, "b2"), SLAB)  # B would exceed its share; A is at its share
    assert [m.key for m in placement.moves] == [k(B, "b0")]
    assert idx.stats(A)["gpu_entries"] == 2 and idx.stats(B)["gpu_entries"] == 2


# -- pinning and promotion -------------------------------------------------------------------


def test_pinned_entries_are_never_evicted() -> None:
    idx = index(gpu=2, host=1)
    idx.admit(A, k(A, "p0"), SLAB)
    idx.admit(A, k(A, "p1"), SLAB)
    assert idx.pin(A, [k(A, "p0"), k(A, "p1"), k(A, "p0")]) == []  # repeats pin once
    assert idx.lookup(A, k(A, "p0")) == Entry(
        k(A, "p0"), SLAB, Tier.GPU, (0,), pins=1, last_use=3, doomed=False
    )
    for i in range(3):
        assert idx.admit(A, k(A, f"n{i}"), SLAB).tier in (Tier.HOST, Tier.DISK)
    assert tier_of(idx, k(A, "p0")) is Tier.GPU and tier_of(idx, k(A, "p1")) is Tier.GPU
    assert idx.unpin(A, [k(A, "p0"), k(A, "p1")]) == []
    placement = idx.admit(A, k(A, "n3"), SLAB)
    assert placement.tier is Tier.GPU and placement.moves[-1].key == k(A, "p0")


def test_pin_promotes_from_host_and_disk_reporting_moves() -> None:
    idx = index(gpu=1, host=1)
    worker = Worker()
    for name in ("x", "y", "z"):
        worker.place(k(A, name), idx.admit(A, k(A, name), SLAB))
    assert [tier_of(idx, k(A, n)) for n in ("x", "y", "z")] == [Tier.DISK, Tier.HOST, Tier.GPU]
    moves = idx.pin(A, [k(A, "y")])  # z makes way for y: HOST <-> GPU swap through the chain
    worker.apply(moves)
    assert [(m.key, m.src_tier, m.dst_tier) for m in moves] == [
        (k(A, "z"), Tier.GPU, Tier.DISK),  # HOST still holds y while z would need it
        (k(A, "y"), Tier.HOST, Tier.GPU),
    ]
    moves = idx.pin(A, [k(A, "x")])  # GPU is all pinned: x is promoted as far as HOST
    worker.apply(moves)
    assert [(m.key, m.src_tier, m.dst_tier, m.src_slabs) for m in moves] == [
        (k(A, "x"), Tier.DISK, Tier.HOST, ())
    ]
    idx.unpin(A, [k(A, "x"), k(A, "y")])
    moves = idx.pin(A, [k(A, "x")])
    worker.apply(moves)
    assert [(m.key, m.src_tier, m.dst_tier) for m in moves] == [
        (k(A, "y"), Tier.GPU, Tier.DISK),
        (k(A, "x"), Tier.HOST, Tier.GPU),
    ]
    worker.matches(idx, [A])


def test_pin_of_missing_key_pins_nothing_and_unpin_checks() -> None:
    idx = index(gpu=2, host=0)
    idx.admit(A, k(A, "x"), SLAB)
    with pytest.raises(UnknownEntryError):
        idx.pin(A, [k(A, "x"), k(A, "nope")])
    entry = idx.lookup(A, k(A, "x"))
    assert entry is not None and entry.pins == 0
    with pytest.raises(UnknownEntryError):
        idx.unpin(A, [k(A, "x")])  # not pinned
    with pytest.raises(UnknownEntryError):
        idx.unpin(A, [k(A, "nope")])
    stats = idx.stats(A)
    assert (stats["gpu_hits"], stats["misses"]) == (1, 1)


def test_concurrent_requests_pin_overlapping_keys() -> None:
    # 4 hot slabs are at most A's fair share of 8 slabs, so a pin's promotion always succeeds
    idx = index(gpu=8, host=4)
    hot = [k(A, f"hot{i}") for i in range(4)]
    for key in hot:
        idx.admit(A, key, SLAB)
    errors: list[str] = []
    stop = threading.Event()

    def request(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(300):
            keys = rng.sample(hot, rng.randint(1, 3))
            idx.pin(A, keys)
            for key in keys:
                entry = idx.lookup(A, key)
                if entry is None or entry.tier is not Tier.GPU or entry.pins < 1:
                    errors.append(f"{key.fact_id} not held on GPU while pinned: {entry}")
            idx.unpin(A, keys)

    def churn() -> None:
        i = 0
        while not stop.is_set():
            tenant = (A, B)[i % 2]
            idx.admit(tenant, k(tenant, f"cold{i}"), SLAB * (1 + i % 2))
            i += 1

    threads = [threading.Thread(target=request, args=(seed,)) for seed in range(4)]
    churner = threading.Thread(target=churn)
    churner.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    churner.join()
    assert errors == []
    assert all(e is not None and e.pins == 0 for e in (idx.lookup(A, key) for key in hot))
    assert idx.stats()["pinned"] == 0 and idx.stats()["evictions"] > 0


# -- removal ---------------------------------------------------------------------------------


def test_remove_frees_slabs_and_pinned_removal_is_deferred() -> None:
    idx = index(gpu=2, host=0)
    worker = Worker()
    for name in ("x", "y"):
        worker.place(k(A, name), idx.admit(A, k(A, name), SLAB))
    removed = idx.remove(A, k(A, "x"))
    assert removed is not None and not removed.doomed and removed.tier is Tier.GPU
    worker.free(removed)
    assert idx.remove(A, k(A, "x")) is None and idx.stats()["gpu_free_bytes"] == SLAB
    idx.pin(A, [k(A, "y")])
    doomed = idx.remove(A, k(A, "y"))
    assert doomed is not None and doomed.doomed and doomed.pins == 1
    assert idx.lookup(A, k(A, "y")) is None and idx.keys(A) == []
    with pytest.raises(UnknownEntryError):
        idx.pin(A, [k(A, "y")])  # invisible to new requests
    assert idx.stats()["gpu_free_bytes"] == SLAB  # still held for the in-flight request
    freed = idx.unpin(A, [k(A, "y")])
    assert [e.key for e in freed] == [k(A, "y")] and freed[0].slabs == doomed.slabs
    worker.free(freed[0])
    assert idx.stats()["gpu_free_bytes"] == 2 * SLAB and idx.stats()["entries"] == 0


def test_readmitting_a_doomed_entry_keeps_it() -> None:
    idx = index(gpu=1, host=0)
    first = idx.admit(A, k(A, "x"), SLAB)
    idx.pin(A, [k(A, "x")])
    idx.remove(A, k(A, "x"))
    assert idx.admit(A, k(A, "x"), SLAB).slabs == first.slabs
    assert idx.unpin(A, [k(A, "x")]) == [] and idx.keys(A) == [k(A, "x")]


def test_remove_tenant_frees_only_that_tenants_slabs() -> None:
    idx = index(gpu=4, host=4)
    worker = Worker()
    for tenant in (A, B):
        for i in range(4):
            key = k(tenant, f"{tenant.value}{i}")
            worker.place(key, idx.admit(tenant, key, SLAB))
    idx.pin(A, [k(A, "a3")])
    removed = idx.remove_tenant(A)
    assert [e.key for e in removed] == sorted(k(A, f"a{i}") for i in range(4))
    for entry in removed:
        if not entry.doomed:
            worker.free(entry)
    assert idx.keys(A) == [] and len(idx.keys(B)) == 4
    assert idx.stats(A)["entries"] == 1  # the pinned one, until its request ends
    (last,) = idx.unpin(A, [k(A, "a3")])
    worker.free(last)
    worker.matches(idx, [A, B])
    assert idx.stats(A)["entries"] == 0 and idx.stats(B)["entries"] == 4
    assert idx.remove_tenant(A) == []


# -- isolation and stats ---------------------------------------------------------------------


def test_every_keyed_method_refuses_another_tenants_key() -> None:
    idx = index(gpu=2, host=0)
    idx.admit(B, k(B, "x"), SLAB)
    foreign = k(B, "x")
    calls: list[Callable[[], object]] = [
        lambda: idx.admit(A, foreign, SLAB),
        lambda: idx.touch(A, foreign),
        lambda: idx.lookup(A, foreign),
        lambda: idx.lookup_for_use(A, foreign),
        lambda: idx.pin(A, [k(A, "mine"), foreign]),
        lambda: idx.unpin(A, [foreign]),
        lambda: idx.remove(A, foreign),
    ]
    for call in calls:
        with pytest.raises(TenantMismatchError):
            call()
    assert idx.keys(B) == [foreign] and idx.stats(B)["misses"] == 0
    assert idx.keys(A) == []


def test_stats_count_hits_per_tier_misses_and_evictions() -> None:
    idx = index(gpu=1, host=1)
    for name in ("x", "y", "z"):
        idx.admit(A, k(A, name), SLAB)
    idx.admit(B, k(B, "w"), 10 * SLAB)  # only fits on disk
    assert idx.lookup_for_use(A, k(A, "z")) is not None  # gpu hit
    assert idx.lookup_for_use(A, k(A, "y")) is not None  # host hit
    assert idx.lookup_for_use(A, k(A, "x")) is not None  # disk hit
    assert idx.lookup_for_use(A, k(A, "nope")) is None  # miss
    idx.pin(B, [k(B, "w")])  # disk hit, stays on disk
    stats_a, stats_b, total = idx.stats(A), idx.stats(B), idx.stats()
    counters = ("gpu_hits", "host_hits", "disk_hits", "misses", "gpu_evictions", "host_evictions")
    assert [stats_a[c] for c in counters] == [1, 1, 1, 1, 2, 1]
    assert [stats_b[c] for c in counters] == [0, 0, 1, 0, 0, 0]
    assert total["disk_hits"] == 2 and total["evictions"] == 3 and total["pinned"] == 1
    assert (stats_b["disk_entries"], stats_b["disk_bytes"], stats_b["pinned"]) == (1, 1000, 1)
    assert idx.stats(C)["entries"] == 0 and "gpu_free_bytes" not in idx.stats(C)


# -- randomized replay -----------------------------------------------------------------------


def test_random_operations_keep_every_invariant() -> None:
    rng = random.Random(1234)
    idx = index(gpu=10, host=12, tenant_gpu_quota_bytes=6, tenant_host_quota_bytes=8)
    worker = Worker()
    tenants = [A, B, C]
    sizes = {k(t, f"f{i}"): rng.randint(1, 3 * SLAB) for t in tenants for i in range(12)}
    pinned: dict[FactKey, int] = {}
    doomed: set[FactKey] = set()  # removed while pinned: the worker still holds their KV
    for step in range(3000):
        tenant = rng.choice(tenants)
        key = k(tenant, f"f{rng.randrange(12)}")
        op = rng.random()
        pinned_before = set(pinned)
        moves: list[Move] | tuple[Move, ...] = ()
        if op < 0.4:
            existed = idx.lookup(tenant, key) is not None or key in doomed
            placement = idx.admit(tenant, key, sizes[key])
            doomed.discard(key)
            moves = placement.moves
            if existed:
                assert placement.moves == ()
            else:
                worker.place(key, placement)
        elif op < 0.6 and idx.lookup(tenant, key) is not None:
            moves = idx.pin(tenant, [key])
            worker.apply(moves)
            pinned[key] = pinned.get(key, 0) + 1
        elif op < 0.8 and pinned:
            victim = rng.choice(sorted(pinned))
            for entry in idx.unpin(victim.tenant, [victim]):
                worker.free(entry)
                doomed.remove(entry.key)
            pinned[victim] -= 1
            if not pinned[victim]:
                del pinned[victim]
        elif op < 0.9:
            removed = idx.remove(tenant, key)
            if removed is not None and removed.doomed:
                doomed.add(key)
            elif removed is not None:
                worker.free(removed)
        else:
            idx.touch(tenant, key)
        for move in moves:  # a pinned entry only ever moves up, and only when pinned again
            if move.key in pinned_before:
                assert _RANK[move.dst_tier] < _RANK[move.src_tier], (step, move)
        for tenant_ in tenants:
            stats = idx.stats(tenant_)
            assert stats["gpu_slab_bytes"] <= 6 * SLAB and stats["host_slab_bytes"] <= 8 * SLAB
        worker.matches(idx, tenants, ignore=doomed)
    for key, count in pinned.items():
        for _ in range(count):
            for entry in idx.unpin(key.tenant, [key]):
                worker.free(entry)
    worker.matches(idx, tenants)
    stats = idx.stats()
    assert stats["pinned"] == 0 and stats["evictions"] > 100 and stats["gpu_hits"] > 50


def test_index_imports_neither_torch_nor_numpy() -> None:
    probe = (
        "import sys, gpu_runtime.pool.index\n"
        "print(','.join(m for m in ('torch', 'numpy') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_prefetch_promotes_unpinned_entries_and_leaves_pinned_ones_in_place() -> None:
    idx = index(gpu=2, host=2)
    worker = Worker()
    for name in ("k1", "k2", "k3", "k4"):  # k1, k2 end up on HOST
        worker.place(k(A, name), idx.admit(A, k(A, name), SLAB))
    idx.pin(A, [k(A, "k2")], promote=False)  # an in-flight reader of k2's host slabs
    assert tier_of(idx, k(A, "k2")) is Tier.HOST
    moves = idx.prefetch(A, [k(A, "k1"), k(A, "k2"), k(A, "gone")])
    worker.apply(moves)
    worker.matches(idx, [A])
    assert tier_of(idx, k(A, "k1")) is Tier.GPU  # promoted, an LRU GPU entry made room
    assert tier_of(idx, k(A, "k2")) is Tier.HOST  # pinned: its slabs must not move
    assert all(m.key != k(A, "k2") for m in moves)
    assert idx.stats(A)["pinned"] == 1  # prefetch pins nothing itself


def test_pin_in_memory_pins_where_entries_are_or_nothing() -> None:
    idx = index(gpu=3, host=3)
    for name in ("g", "h", "d"):
        idx.admit(A, k(A, name), SLAB)
    idx.demote(A, [k(A, "h")], Tier.HOST)
    idx.demote(A, [k(A, "d")], Tier.DISK)
    tiers = {n: e.tier for n in ("g", "h", "d") if (e := idx.lookup(A, k(A, n))) is not None}
    assert tiers == {"g": Tier.GPU, "h": Tier.HOST, "d": Tier.DISK}

    before = idx.stats(A)
    assert idx.pin_in_memory(A, [k(A, "g"), k(A, "d")]) is None  # a disk entry: slow path
    assert idx.pin_in_memory(A, [k(A, "g"), k(A, "nope")]) is None  # unknown key
    assert idx.stats(A) == before  # nothing pinned, nothing counted

    placed = idx.pin_in_memory(A, [k(A, "h"), k(A, "g")])
    assert placed is not None and [tier for tier, _ in placed] == [Tier.HOST, Tier.GPU]
    assert placed[0][1] == idx.lookup(A, k(A, "h")).slabs  # type: ignore[union-attr]
    after = idx.stats(A)
    assert after["pinned"] == 2 and after["gpu_hits"] == before["gpu_hits"] + 1
    assert after["host_hits"] == before["host_hits"] + 1
    assert idx.lookup(A, k(A, "h")).tier is Tier.HOST  # type: ignore[union-attr]  # not promoted
    with pytest.raises(TenantMismatchError):
        idx.pin_in_memory(B, [k(A, "g")])
    idx.unpin(A, [k(A, "h"), k(A, "g")])
    assert idx.stats(A)["pinned"] == 0


def test_prefetch_keeps_every_fact_it_promotes_for_the_request() -> None:
    """Its facts are marked used before any is promoted, so promoting the second cannot evict
    the first (which would keep its old last use and be the GPU tier's oldest entry)."""
    idx = index(gpu=2, host=2)
    worker = Worker()
    for name in ("a", "b", "x", "y"):  # a, b end up on HOST, older than x and y
        worker.place(k(A, name), idx.admit(A, k(A, name), SLAB))
    moves = idx.prefetch(A, [k(A, "a"), k(A, "b")])
    worker.apply(moves)
    worker.matches(idx, [A])
    assert tier_of(idx, k(A, "a")) is Tier.GPU and tier_of(idx, k(A, "b")) is Tier.GPU
    assert {m.key for m in moves if m.dst_tier is Tier.GPU} == {k(A, "a"), k(A, "b")}
