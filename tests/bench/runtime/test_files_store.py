"""The file-per-fact layout (the store benchmark's baseline): restart bit for bit, corruption
detected, deletion everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.runtime.files_store import FilePerFactKVStore
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.memory import InMemoryKVStore
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 5, 1)
A, B = TenantId("a"), TenantId("b")


def kv(seed: int) -> FactKV:
    g = torch.Generator().manual_seed(seed)
    return FactKV.build(
        torch.randn(3, 4, 2, 8, generator=g).bfloat16(),
        torch.randn(3, 4, 2, 8, generator=g).bfloat16(),
        torch.arange(10, 14),
    )


def test_restart_recovers_bit_identical_kv_without_reencoding(tmp_path: Path) -> None:
    first = InMemoryKVStore(FilePerFactKVStore(tmp_path))
    keys = [FactKey.for_fact(A, f"f{i}", 1, CFG) for i in range(3)]
    originals = {k: kv(i) for i, k in enumerate(keys)}
    for key, value in originals.items():
        first.put(A, key, value)

    restarted = InMemoryKVStore(FilePerFactKVStore(tmp_path))  # a new process: nothing in memory
    assert restarted.keys(A) == sorted(keys)
    assert restarted.contains_all(A, keys)
    for key, value in originals.items():
        loaded = restarted.get(A, key)
        assert loaded is not None and loaded.verify()
        assert torch.equal(loaded.keys, value.keys) and torch.equal(loaded.values, value.values)
        assert torch.equal(loaded.positions, value.positions)
    assert not list(tmp_path.rglob(".tmp-*"))  # writes are atomic: no leftovers


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_or_partial_files_are_never_served(tmp_path: Path, damage: str) -> None:
    disk = FilePerFactKVStore(tmp_path)
    key = FactKey.for_fact(A, "f", 1, CFG)
    disk.put(key, kv(0))
    path = disk.path(key)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-200] ^= 0xFF  # inside the tensor payload
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))

    store = InMemoryKVStore(FilePerFactKVStore(tmp_path))
    assert store.get(A, key) is None  # detected: it will be re-encoded
    assert not path.exists()
    assert not store.contains_all(A, [key])


def test_deletion_purges_memory_and_disk_per_tenant(tmp_path: Path) -> None:
    store = InMemoryKVStore(FilePerFactKVStore(tmp_path))
    ka, kb = FactKey.for_fact(A, "f", 1, CFG), FactKey.for_fact(B, "f", 1, CFG)
    store.put(A, ka, kv(1))
    store.put(B, kb, kv(2))
    assert store.delete(A, ka)
    assert store.get(A, ka) is None and not store.disk.exists(ka)  # type: ignore[union-attr]
    assert store.get(B, kb) is not None  # the other tenant's identical fact is untouched
    store.delete_tenant(B)
    assert store.keys(B) == [] and InMemoryKVStore(FilePerFactKVStore(tmp_path)).keys(B) == []


def test_a_file_under_another_key_is_refused(tmp_path: Path) -> None:
    disk = FilePerFactKVStore(tmp_path)
    real, other = FactKey.for_fact(A, "f", 1, CFG), FactKey.for_fact(A, "g", 1, CFG)
    disk.put(real, kv(3))
    disk.path(other).parent.mkdir(parents=True, exist_ok=True)
    disk.path(real).rename(disk.path(other))  # a file moved or mixed up on disk
    assert disk.get(other) is None
