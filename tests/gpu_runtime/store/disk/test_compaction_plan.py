"""Segment allocation and compaction planning, on plain numbers (no files)."""

from __future__ import annotations

import pytest

from gpu_runtime.store.disk import compaction as plan
from gpu_runtime.store.disk.extent_index import TenantIndex
from gpu_runtime.store.disk.records import Delete, Extent, Put

pytestmark = pytest.mark.unit

POLICY = plan.Policy(segment_bytes=1000, dead_fraction=0.5, min_dead_bytes=100)


def test_appends_fill_the_newest_segment_then_open_the_next() -> None:
    assert plan.append_target({}, POLICY, 10) == 1
    assert plan.append_target({1: 900}, POLICY, 100) == 1
    assert plan.append_target({1: 900}, POLICY, 101) == 2
    assert plan.append_target({1: 0}, POLICY, 5000) == 1  # larger than a segment: alone
    assert plan.append_target({1: 10, 3: 5}, POLICY, 10) == 3


def test_compaction_never_targets_the_segment_it_empties() -> None:
    assert plan.compaction_target({1: 500, 2: 100}, 1, 200, POLICY) == 2
    assert plan.compaction_target({1: 500, 2: 100}, 2, 50, POLICY) == 3


def test_index_accounting_follows_puts_supersedes_and_deletes() -> None:
    index = TenantIndex()
    index.apply(Put(b"a", Extent(1, 0, 100, 0)))
    index.apply(Put(b"b", Extent(1, 100, 200, 0)))
    dead = index.apply(Put(b"a", Extent(2, 0, 100, 0)))  # superseded
    assert dead == Extent(1, 0, 100, 0)
    assert index.live_bytes == {1: 200, 2: 100} and index.live_ends == {1: 300, 2: 100}
    assert index.apply(Delete(b"b")) == Extent(1, 100, 200, 0)
    assert index.live_bytes == {2: 100} and 1 not in index.live_ends
    assert index.apply(Delete(b"zz")) is None and len(index) == 1 and index.entries_logged == 5


def test_segments_to_drop_and_to_compact() -> None:
    index = TenantIndex()
    index.apply(Put(b"a", Extent(1, 0, 100, 0)))  # segment 1: 100 live of 1000
    index.apply(Put(b"b", Extent(2, 0, 600, 0)))  # segment 2: 600 live of 1000
    index.apply(Put(b"c", Extent(4, 0, 50, 0)))  # segment 4: newest, 50 of 500
    uses = plan.usage(index, {1: 1000, 2: 1000, 3: 800, 4: 500})
    assert plan.droppable(uses) == [3]  # nothing live, not the newest
    assert plan.to_compact(uses, POLICY) == [1, 4]  # most dead first; 2 is mostly live
    small = plan.usage(index, {1: 150, 2: 1000, 4: 60})
    assert plan.to_compact(small, POLICY) == []  # dead space under min_dead_bytes
    assert plan.droppable(plan.usage(TenantIndex(), {5: 0})) == []  # newest stays


def test_the_index_log_is_rewritten_once_mostly_history() -> None:
    policy = plan.Policy(min_index_entries=10, index_slack=4)
    index = TenantIndex()
    for i in range(9):
        index.apply(Put(b"k", Extent(1, 64 * i, 64, 0)))
    assert not plan.index_needs_rewrite(index, policy)  # under the minimum
    index.apply(Put(b"k", Extent(1, 640, 64, 0)))
    assert plan.index_needs_rewrite(index, policy)  # 10 entries for 1 live fact


def test_segment_names_round_trip() -> None:
    assert plan.segment_id(plan.segment_name(42)) == 42
    assert plan.segment_id("index") is None and plan.segment_id("seg-x.seg") is None


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError):
        plan.Policy(dead_fraction=1.5)
