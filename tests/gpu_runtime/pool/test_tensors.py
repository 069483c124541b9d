"""Tiered pool tensors on CPU (the 'GPU' arena is plain memory): eviction and reload are
bit-identical, deletion reaches every tier, a restart serves from disk."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from gpu_runtime.pool.arena import unpack
from gpu_runtime.pool.entries import Tier
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.packed import PackedKVStore
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 0, 1)
T, U = TenantId("t"), TenantId("u")
SLAB = 1024


def kv(seed: int) -> FactKV:  # 2 layers x 6 tokens x 2 heads x 8 dims bf16: 768 B + 48 B
    g = torch.Generator().manual_seed(seed)
    return FactKV.build(
        torch.randn(2, 6, 2, 8, generator=g).bfloat16(),
        torch.randn(2, 6, 2, 8, generator=g).bfloat16(),
        torch.arange(6) + seed,
    )


def same(a: FactKV | None, b: FactKV) -> bool:
    return (
        a is not None
        and torch.equal(a.keys, b.keys)
        and torch.equal(a.values, b.values)
        and torch.equal(a.positions, b.positions)
        and a.verify()
    )


def pool(tmp_path: Path, gpu_slabs: int = 2, host_slabs: int = 2) -> TieredKVPool:
    return TieredKVPool.create(tmp_path, gpu_slabs * SLAB, host_slabs * SLAB, SLAB)


def test_eviction_chain_and_reload_are_bit_identical(tmp_path: Path) -> None:
    p = pool(tmp_path)
    items = {FactKey.for_fact(T, f"f{i}", 1, CFG): kv(i) for i in range(6)}
    for key, value in items.items():
        p.put(T, key, value)
    stats = p.stats(T)
    assert stats["gpu_entries"] == 2 and stats["host_entries"] == 2 and stats["disk_entries"] == 2
    assert stats["evictions"] >= 4
    for key, value in items.items():  # every tier serves the exact bytes back
        assert same(p.get(T, key), value)
    last = list(items)[-1]
    assert same(p.get(T, last), items[last])  # just promoted: now served from the GPU arena
    stats = p.stats(T)
    assert stats["gpu_hits"] >= 1 and stats["disk_hits"] + stats["host_hits"] >= 1


def test_deletion_reaches_every_tier(tmp_path: Path) -> None:
    p = pool(tmp_path, gpu_slabs=1, host_slabs=1)
    keys = [FactKey.for_fact(T, f"f{i}", 1, CFG) for i in range(3)]
    for i, key in enumerate(keys):
        p.put(T, key, kv(i))
    tiers = {p.index.lookup(T, k).tier for k in keys}  # type: ignore[union-attr]
    assert tiers == {Tier.GPU, Tier.HOST, Tier.DISK}
    for key in keys:
        assert p.delete(T, key)
        assert p.get(T, key) is None and not p.disk.exists(key)
    assert p.keys(T) == [] and p.stats(T)["entries"] == 0


def test_restart_serves_from_disk_and_tenants_stay_apart(tmp_path: Path) -> None:
    first = pool(tmp_path)
    kt, ku = FactKey.for_fact(T, "f", 1, CFG), FactKey.for_fact(U, "f", 1, CFG)
    first.put(T, kt, kv(1))
    first.put(U, ku, kv(2))
    restarted = pool(tmp_path)
    assert restarted.contains_all(T, [kt]) and restarted.keys(T) == [kt]
    assert same(restarted.get(T, kt), kv(1)) and same(restarted.get(U, ku), kv(2))
    restarted.delete_tenant(U)
    assert restarted.get(U, ku) is None and same(restarted.get(T, kt), kv(1))


def test_demote_to_host_then_reload_is_exact(tmp_path: Path) -> None:
    p = pool(tmp_path, gpu_slabs=4, host_slabs=4)
    key = FactKey.for_fact(T, "f", 1, CFG)
    p.put(T, key, kv(7))
    assert p.index.lookup(T, key).tier is Tier.GPU  # type: ignore[union-attr]
    p.demote(T, [key], Tier.HOST)
    assert p.index.lookup(T, key).tier is Tier.HOST  # type: ignore[union-attr]
    assert same(p.get(T, key), kv(7))  # loaded back (and promoted) bit for bit
    assert p.index.lookup(T, key).tier is Tier.GPU  # type: ignore[union-attr]
    p.demote(T, [key], Tier.DISK)
    assert p.index.lookup(T, key).tier is Tier.DISK and same(p.get(T, key), kv(7))  # type: ignore[union-attr]


def test_prefetch_moves_host_facts_to_the_gpu_tier_bit_identically(tmp_path: Path) -> None:
    p = pool(tmp_path)
    items = {FactKey.for_fact(T, f"f{i}", 1, CFG): kv(i) for i in range(4)}
    for key, value in items.items():
        p.put(T, key, value)
    placements = p.index.placements(T, list(items))
    on_host = [key for key, at in zip(items, placements, strict=True) if at and at[0] is Tier.HOST]
    assert on_host
    p.prefetch(T, on_host[:1])
    placed = p.index.placements(T, on_host[:1])[0]
    assert placed is not None and placed[0] is Tier.GPU
    resident = p.acquire(T, on_host[:1])
    assert resident is not None and resident.arenas.tolist() == [0]  # the GPU arena now
    p.release(T, on_host[:1])
    for key, value in items.items():
        assert same(p.get(T, key), value)


def test_acquire_reports_where_each_pinned_fact_is_and_pins_until_release(tmp_path: Path) -> None:
    """Facts on both memory tiers and one only on disk (reloaded): arenas, slab ids and capture
    positions per fact, in the order asked for, as the fused loader reads them."""
    p = pool(tmp_path, gpu_slabs=2, host_slabs=3)
    items = {FactKey.for_fact(T, f"f{i}", 1, CFG): kv(i) for i in range(4)}
    for key, value in items.items():
        p.put(T, key, value)
    keys = list(items)[::-1]  # newest (GPU) first, oldest last
    p.demote(T, keys[-1:], Tier.DISK)
    assert p.index.placements(T, keys[-1:]) == [(Tier.DISK, ())]
    before = {tier: served(p, tier) for tier in ("gpu", "host")}
    pinned = p.acquire(T, keys)
    assert pinned is not None and pinned.keys == tuple(keys)
    placed = p.index.placements(T, keys)
    assert all(at is not None and at[0] is not Tier.DISK for at in placed)  # all in memory now
    arenas = [TieredKVPool.ARENAS.index(at[0]) for at in placed if at is not None]
    assert pinned.arenas.tolist() == arenas and 0 in arenas and 1 in arenas
    assert pinned.on_host
    assert pinned.n_layers == {2} and pinned.n_tokens.tolist() == [6] * len(keys)
    for i, (key, at) in enumerate(zip(keys, placed, strict=True)):
        assert at is not None
        start = int(pinned.slab_rows[i])
        assert tuple(pinned.slabs[start : start + len(at[1])].tolist()) == at[1]
        first = int(pinned.position_rows[i])
        assert pinned.positions[first : first + 6].tolist() == items[key].positions.tolist()
    assert p.stats(T)["pinned"] == len(keys)
    for tier, arena in (("gpu", 0), ("host", 1)):  # load latency: one per fact, by tier
        assert served(p, tier) - before[tier] == arenas.count(arena)
    p.release(T, keys)
    assert p.stats(T)["pinned"] == 0


def served(p: TieredKVPool, tier: str) -> int:
    """Facts whose load the pool timed on ``tier`` (its load latency histogram)."""
    return int(p.metrics.snapshot()[tier]["count"])


def test_acquire_pins_nothing_when_a_fact_is_gone(tmp_path: Path) -> None:
    p = pool(tmp_path)
    held = FactKey.for_fact(T, "held", 1, CFG)
    p.put(T, held, kv(1))
    assert p.acquire(T, [held, FactKey.for_fact(T, "never-stored", 1, CFG)]) is None
    assert p.stats(T)["pinned"] == 0


def test_a_fact_reloaded_from_disk_is_not_written_again(tmp_path: Path) -> None:
    """After a restart the pool reads the durable copy; it does not rewrite (and fsync) it."""
    key = FactKey.for_fact(T, "f", 1, CFG)
    pool(tmp_path).put(T, key, kv(1))
    restarted = pool(tmp_path)
    disk = restarted.disk
    assert isinstance(disk, PackedKVStore)
    written = disk.locate(key)  # a rewrite appends the fact again: a new place
    assert written is not None
    assert same(restarted.get(T, key), kv(1))
    assert restarted.acquire(T, [key]) is not None
    assert disk.locate(key) == written and disk.usage(T)["disk_segment_bytes"] == written.length


def _purged_elsewhere(p: TieredKVPool, key: FactKey) -> None:
    """Another replica of the store purges the fact: its durable copy goes, this pool's index
    still places it on disk."""
    p.disk.delete(key)


@pytest.mark.parametrize("read", ["get", "acquire", "prefetch then get"])
def test_a_fact_whose_durable_copy_is_gone_is_never_served_from_stale_slabs(
    tmp_path: Path, read: str
) -> None:
    """A fact demoted to disk whose copy there is then gone (purged by another replica, or found
    damaged) must read as gone: the slabs its promotion was given hold other bytes. Here they
    hold another tenant's fact, admitted after the demotion and then pushed down itself, so a
    read of those slabs would hand tenant T tenant U's KV."""
    p = pool(tmp_path, gpu_slabs=1, host_slabs=1)
    lost, theirs = FactKey.for_fact(T, "lost", 1, CFG), FactKey.for_fact(U, "theirs", 1, CFG)
    p.put(T, lost, kv(1))
    p.demote(T, [lost], Tier.DISK)
    p.put(U, theirs, kv(2))  # into the GPU slab the demotion freed
    p.demote(U, [theirs], Tier.HOST)  # and out again: its bytes stay in the freed GPU slab
    _purged_elsewhere(p, lost)

    if read == "acquire":
        assert p.acquire(T, [lost]) is None
    else:
        if read == "prefetch then get":
            p.prefetch(T, [lost])
        assert p.get(T, lost) is None
    assert p.get(T, lost) is None  # and stays gone
    stats = p.stats(T)
    assert stats["entries"] == stats["pinned"] == 0, stats
    assert same(p.get(U, theirs), kv(2))  # the neighbour untouched
    assert p.stats()["gpu_free_bytes"] + p.stats()["host_free_bytes"] >= SLAB  # nothing leaked


@pytest.mark.parametrize("seed", range(6))
def test_every_read_is_the_fact_or_nothing_under_random_operations(
    tmp_path: Path, seed: int
) -> None:
    """Two tenants' facts through a small pool (3 GPU, 3 host slabs) under random puts, reads,
    acquires, prefetches, demotions, deletes and durable copies lost behind the pool's back
    (another replica's purge): a read returns the fact's own bytes or nothing, never another
    fact's, and when the durable copy is gone it reads as gone once it has left memory. Pins
    are released as the engine's reclaim does."""
    rng = random.Random(seed)
    p = pool(tmp_path, gpu_slabs=3, host_slabs=3)
    keys = [FactKey.for_fact(t, f"f{n}", 1, CFG) for t in (T, U) for n in range(6)]
    value = {key: kv(i) for i, key in enumerate(keys)}
    durable: set[FactKey] = set()  # facts whose copy is on disk
    for step in range(300):
        key = rng.choice(keys)
        tenant = key.tenant
        op = rng.choice(["put", "put", "get", "get", "acquire", "prefetch", "demote", "delete",
                         "lose"])  # fmt: skip
        if op == "put":
            p.put(tenant, key, value[key])
            durable.add(key)
        elif op == "get":
            got = p.get(tenant, key)
            assert got is None or same(got, value[key]), (step, op, key)
            if key in durable:
                assert got is not None, (step, op, key)  # stored: some tier serves it
        elif op == "acquire":
            pinned = p.acquire(tenant, [key])
            if pinned is not None:
                assert pinned.keys == (key,)
                tier = Tier.HOST if pinned.arenas[0] else Tier.GPU
                slabs = tuple(int(s) for s in pinned.slabs)
                packing = p._packings[key]
                read = p._arena(tier).read(slabs, packing.nbytes)
                assert same(unpack(read, packing), value[key]), (step, op, key)
                p.release(tenant, [key])
        elif op == "prefetch":
            p.prefetch(tenant, [key])
        elif op == "demote":
            p.demote(tenant, [key], rng.choice([Tier.HOST, Tier.DISK]))
        elif op == "delete":
            p.delete(tenant, key)
            durable.discard(key)
            assert p.get(tenant, key) is None
        else:
            p.disk.delete(key)  # behind the pool's back
            durable.discard(key)
            if rng.random() < 0.5:
                p.demote(tenant, [key], Tier.DISK)  # out of memory: it must now read as gone
                assert p.get(tenant, key) is None, (step, op, key)
                assert p.acquire(tenant, [key]) is None, (step, op, key)
    assert p.stats()["pinned"] == 0
