"""The scheduler half's catalog: what it may claim, from worker reports and the durable store."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_runtime.connector.catalog import FactCatalog
from gpu_runtime.connector.metadata import WorkerReport
from gpu_runtime.errors import TenantMismatchError
from gpu_runtime.store.disk.compaction import Policy
from gpu_runtime.store.disk.paths import tenant_dir_name
from gpu_runtime.store.disk.records import key_bytes
from gpu_runtime.store.disk.stored_facts import StoredFacts
from gpu_runtime.store.disk.tenant_log import Item, TenantLog
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 0, 1)
A, B = TenantId("a"), TenantId("b")


def key(tenant: TenantId, name: str) -> FactKey:
    return FactKey.for_fact(tenant, name, 1, CFG)


def test_reported_facts_are_claimable_and_purges_forget_them() -> None:
    catalog = FactCatalog(stored=None)
    f, g = key(A, "f"), key(A, "g")
    assert not catalog.available(A, [f])
    catalog.apply(WorkerReport(stored=[f, g]))
    assert catalog.available(A, [f, g]) and catalog.available(A, [])
    catalog.apply(WorkerReport(dropped=[g]))
    assert catalog.available(A, [f]) and not catalog.available(A, [f, g])
    catalog.apply(WorkerReport(stored=[key(B, "f")], dropped_tenants=[A]))
    assert not catalog.available(A, [f]) and catalog.available(B, [key(B, "f")])


def test_with_a_durable_store_it_alone_says_what_may_be_claimed(tmp_path: Path) -> None:
    catalog = FactCatalog(StoredFacts(tmp_path))
    f, g = key(A, "f"), key(A, "g")
    assert not catalog.available(A, [f])  # nothing stored anywhere
    catalog.apply(WorkerReport(stored=[g]))  # a report is not what makes a fact claimable
    assert not catalog.available(A, [g])
    log = TenantLog(tmp_path / tenant_dir_name(A), Policy())  # a worker process writing
    log.append([Item(key_bytes(f), b"{}", (memoryview(b"kv"),))])  # or another replica
    assert catalog.available(A, [f])
    log.delete([key_bytes(f)])  # a purge: gone at once, no worker report needed
    assert not catalog.available(A, [f])


def test_another_tenants_key_is_refused_even_when_known() -> None:
    catalog = FactCatalog(stored=None)
    catalog.apply(WorkerReport(stored=[key(A, "f")]))
    with pytest.raises(TenantMismatchError):
        catalog.available(B, [key(A, "f")])


def test_the_remembered_set_is_bounded() -> None:
    catalog = FactCatalog(stored=None, limit=3)
    catalog.apply(WorkerReport(stored=[key(A, str(i)) for i in range(5)]))
    assert len(catalog) == 3
    assert catalog.available(A, [key(A, "4")]) and not catalog.available(A, [key(A, "0")])


def test_reports_of_several_ranks_merge() -> None:
    one = WorkerReport(stored=[key(A, "f")], failed_loads={"r1": 128})
    two = WorkerReport(dropped=[key(A, "g")], failed_loads={"r1": 0, "r2": 16})
    merged = one.merge(two)
    assert merged.stored == [key(A, "f")] and merged.dropped == [key(A, "g")]
    assert merged.failed_loads == {"r1": 0, "r2": 16}  # the earliest position per request
    assert not WorkerReport() and merged
