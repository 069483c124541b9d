"""The LRU heap behind eviction planning, and the index built on it against the index as it was
(``SortingIndex``, the benchmark's reference: a sort of the tier at every plan): the same
decisions, step by step, over random workloads."""

from __future__ import annotations

import random
from contextlib import closing
from dataclasses import dataclass

import pytest

from bench.runtime.index import SortingIndex
from gpu_runtime.pool.entries import Tier, UnknownEntryError
from gpu_runtime.pool.index import ResidencyIndex
from gpu_runtime.pool.lru import LruHeap, place
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit


@dataclass(eq=False)
class Item:
    name: str
    last_use: int
    placement: int = 0


def _order(heap: LruHeap) -> list[str]:
    return [item.name for item in heap.walk()]  # type: ignore[attr-defined]


def test_walk_is_least_recently_used_first_after_uses_and_moves() -> None:
    heap = LruHeap()
    items = [Item(f"i{n}", n) for n in range(5)]
    for item in reversed(items):
        place(item)
        heap.add(item)
    assert _order(heap) == ["i0", "i1", "i2", "i3", "i4"]
    items[0].last_use, items[2].last_use = 10, 11  # used: only the tick moves
    assert _order(heap) == ["i1", "i3", "i4", "i0", "i2"]
    heap.remove(items[3])  # left the tier
    assert _order(heap) == ["i1", "i4", "i0", "i2"] and len(heap) == 4
    place(items[3])
    heap.add(items[3])  # back again, with its old last use: it sorts by that
    assert _order(heap) == ["i1", "i3", "i4", "i0", "i2"]


def test_a_walk_stopped_early_leaves_the_order_as_it_was() -> None:
    heap = LruHeap()
    for n in range(6):
        item = Item(f"i{n}", n)
        place(item)
        heap.add(item)
    with closing(heap.walk()) as walk:
        assert [next(walk).name for _ in range(3)] == ["i0", "i1", "i2"]  # type: ignore[attr-defined]
    assert _order(heap) == [f"i{n}" for n in range(6)]


def test_heaps_sharing_an_entry_agree_on_its_stay() -> None:
    """A tier's heap and a tenant's heap hold the same entry; when it leaves the tier and comes
    back on another tier, neither old record counts."""
    tier, tenant, elsewhere = LruHeap(), LruHeap(), LruHeap()
    a, b = Item("a", 1), Item("b", 2)
    for item in (a, b):
        place(item)
        tier.add(item)
        tenant.add(item)
    tier.remove(a)
    tenant.remove(a)
    place(a)
    elsewhere.add(a)  # a moved to another tier
    assert _order(tier) == _order(tenant) == ["b"] and _order(elsewhere) == ["a"]


def test_stale_records_are_compacted() -> None:
    heap = LruHeap()
    items = [Item(f"i{n}", n) for n in range(1000)]
    for item in items:
        place(item)
        heap.add(item)
    for item in items[:-10]:  # the newest stay; the stale records never reach the top
        heap.remove(item)
    assert len(heap) == 10 and len(heap._heap) <= 2 * 10 + 64
    assert _order(heap) == [f"i{n}" for n in range(990, 1000)]


CFG = EncodingConfig("m", 0, 1)
TENANTS = [TenantId("a"), TenantId("b"), TenantId("c")]


@pytest.mark.parametrize("seed", range(12))
def test_same_decisions_as_sorting_the_tier_at_every_plan(seed: int) -> None:
    rng = random.Random(seed)
    quota = rng.choice([None, 6, 9])
    args = (12 * 100, 10 * 100, 100, quota and quota * 100, quota and quota * 100)
    fast, slow = ResidencyIndex(*args), SortingIndex(*args)
    keys = [FactKey.for_fact(t, f"f{n}", 1, CFG) for t in TENANTS for n in range(15)]
    size = {key: rng.randint(1, 3) * 100 - rng.randint(0, 50) for key in keys}
    pinned: list[FactKey] = []
    for step in range(600):
        key = rng.choice(keys)
        tenant = key.tenant
        batch = [k for k in rng.sample(keys, 4) if k.tenant == tenant] + [key]
        op = rng.choice(["admit", "admit", "touch", "pin", "unpin", "prefetch", "demote",
                         "remove", "pin_in_memory"])  # fmt: skip
        promote, down_to = rng.random() < 0.5, rng.choice([Tier.HOST, Tier.DISK])
        results: list[object] = []
        for idx in (fast, slow):
            if op == "admit":
                results.append(idx.admit(tenant, key, size[key]))
            elif op == "touch":
                results.append(idx.touch(tenant, key))
            elif op == "pin":
                try:
                    results.append(idx.pin(tenant, batch, promote=promote))
                except UnknownEntryError as exc:
                    results.append(("unknown", exc.args))
            elif op == "unpin":
                results.append(idx.unpin(tenant, [key]) if key in pinned else None)
            elif op == "prefetch":
                results.append(idx.prefetch(tenant, batch))
            elif op == "demote":
                results.append(idx.demote(tenant, batch, down_to))
            elif op == "remove":
                results.append(idx.remove(tenant, key))
            else:
                results.append(idx.pin_in_memory(tenant, batch))
        assert results[0] == results[1], (step, op)
        refused = results[0] is None or isinstance(results[0], tuple)  # absent keys: nothing pinned
        if op in ("pin", "pin_in_memory") and not refused:
            pinned.extend(dict.fromkeys(batch))
        elif op == "unpin" and key in pinned:
            pinned.remove(key)
        for tenant in TENANTS:
            assert fast.stats(tenant) == slow.stats(tenant), (step, op)
    assert [fast.lookup(k.tenant, k) for k in keys] == [slow.lookup(k.tenant, k) for k in keys]
