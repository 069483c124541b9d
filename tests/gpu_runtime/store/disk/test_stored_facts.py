"""``StoredFacts``: the torch-free view the engine core's catalog and the runtime server keep of
the durable store, following writes another process makes (here a ``TenantLog`` writing the same
directory, as the worker process does)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpu_runtime.store.disk.compaction import Policy
from gpu_runtime.store.disk.paths import tenant_dir_name
from gpu_runtime.store.disk.records import key_bytes
from gpu_runtime.store.disk.stored_facts import StoredFacts
from gpu_runtime.store.disk.tenant_log import Item, TenantLog
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 0, 1)
A, B = TenantId("a"), TenantId("b")
POLICY = Policy(segment_bytes=8 << 10, min_dead_bytes=512, min_index_entries=8, index_slack=2)


def key(tenant: TenantId, name: str) -> FactKey:
    return FactKey.for_fact(tenant, name, 1, CFG)


def writer(root: Path, tenant: TenantId) -> TenantLog:
    return TenantLog(root / tenant_dir_name(tenant), POLICY)


def put(log: TenantLog, *keys: FactKey, size: int = 1000) -> None:
    log.append([Item(key_bytes(k), b"{}", (memoryview(bytes(size) + b"x"),)) for k in keys])


def test_follows_puts_deletes_and_rewrites_of_another_writer(tmp_path: Path) -> None:
    view, log = StoredFacts(tmp_path), writer(tmp_path, A)
    f, g = key(A, "f"), key(A, "g")
    assert not view.contains(f) and view.size(f) is None
    put(log, f)
    assert view.contains(f) and view.contains_all(A, [f]) and not view.contains_all(A, [f, g])
    size = view.size(f)
    assert size is not None and size > 1000
    put(log, g)
    log.delete([key_bytes(f)])
    assert not view.contains(f) and view.contains(g)
    for _ in range(10):  # enough history that the index log is rewritten (a new file)
        put(log, g)
    log.compact()
    assert view.contains(g) and not view.contains(f)
    assert view.locate(g) == log.lookup(key_bytes(g))


def test_a_deleted_tenant_is_forgotten_and_may_start_over(tmp_path: Path) -> None:
    view, log = StoredFacts(tmp_path), writer(tmp_path, A)
    put(log, key(A, "f"))
    assert view.contains(key(A, "f"))
    log.remove()
    assert not view.contains(key(A, "f"))
    put(writer(tmp_path, A), key(A, "g"))
    assert view.contains(key(A, "g")) and not view.contains(key(A, "f"))


def test_tenants_are_apart(tmp_path: Path) -> None:
    view = StoredFacts(tmp_path)
    put(writer(tmp_path, A), key(A, "f"))
    assert not view.contains(key(B, "f"))
    assert not view.contains_all(B, [key(A, "f")])  # a key of A never counts for B


def test_followers_are_bounded(tmp_path: Path) -> None:
    view = StoredFacts(tmp_path, max_entries=3)
    tenants = [TenantId(f"t{i}") for i in range(5)]
    for tenant in tenants:
        put(writer(tmp_path, tenant), key(tenant, "a"), key(tenant, "b"), size=10)
        assert view.contains(key(tenant, "a"))
    assert len(view._followers) <= 2
    assert all(view.contains(key(t, "b")) for t in tenants)  # dropped ones are read again


def test_torch_free_modules_import_without_torch() -> None:
    modules = (
        "gpu_runtime.store.disk.stored_facts, gpu_runtime.store.disk.tenant_log, "
        "gpu_runtime.store.disk.compaction, gpu_runtime.store.disk.recovery, "
        "gpu_runtime.store.disk.segment_files, "
        "gpu_runtime.connector.catalog, gpu_runtime.store.base"
    )
    probe = f"import sys, {modules}\nprint('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
