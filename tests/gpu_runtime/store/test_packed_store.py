"""The runtime's durable store (packed segments) with real FactKV tensors: restart bit for bit,
corruption never served, a delete leaves no byte of the fact's KV in any file, tenants apart,
background compaction, and files of the previous layout removed on delete."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from bench.runtime.files_store import FilePerFactKVStore
from gpu_runtime.store.disk.compaction import Policy, segment_name
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.memory import InMemoryKVStore
from gpu_runtime.store.packed import PackedKVStore
from gpu_runtime.store.quant import is_fp8, quantize
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 5, 1)
A, B = TenantId("a"), TenantId("b")
SMALL = Policy(segment_bytes=64 << 10, dead_fraction=0.5, min_dead_bytes=4096)


def kv(seed: int, dtype: torch.dtype = torch.bfloat16, tokens: int = 4) -> FactKV:
    g = torch.Generator().manual_seed(seed)
    keys, values = (torch.randn(3, tokens, 2, 8, generator=g) for _ in range(2))
    positions = torch.arange(10, 10 + tokens)
    if is_fp8(dtype):  # FP8 facts carry float32 scales per token and head
        (qk, sk), (qv, sv) = quantize(keys, dtype), quantize(values, dtype)
        return FactKV.build(qk, qv, positions, sk, sv)
    return FactKV.build(keys.to(dtype), values.to(dtype), positions)


def same(a: FactKV | None, b: FactKV) -> bool:
    return (
        a is not None
        and a.keys.dtype == b.keys.dtype
        and len(a.tensors) == len(b.tensors)
        and all(torch.equal(x, y) for x, y in zip(a.tensors, b.tensors, strict=True))
        and a.checksum == b.checksum
        and a.verify()
    )


def raw_pieces(value: FactKV) -> list[bytes]:
    """64-byte pieces of the fact's key and value bytes, as they would sit in a file."""
    data = b"".join(
        t.contiguous().view(torch.uint8).numpy().tobytes() for t in (value.keys, value.values)
    )
    return [data[i : i + 64] for i in range(0, len(data) - 63, 64)]


def files_holding(root: Path, value: FactKV) -> list[str]:
    pieces = raw_pieces(value)
    return [
        p.name for p in root.rglob("*") if p.is_file() and any(x in p.read_bytes() for x in pieces)
    ]


@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2]
)
def test_restart_serves_bit_identical_kv_without_reencoding(
    tmp_path: Path, dtype: torch.dtype
) -> None:
    first = InMemoryKVStore(PackedKVStore(tmp_path))
    keys = [FactKey.for_fact(A, f"f{i}", 1, CFG) for i in range(3)]
    originals = {k: kv(i, dtype, tokens=3 + i) for i, k in enumerate(keys)}
    first.put_many(A, list(originals.items()))
    restarted = InMemoryKVStore(PackedKVStore(tmp_path))  # a new process: nothing in memory
    assert restarted.keys(A) == sorted(keys)
    assert restarted.contains_all(A, keys)
    for key, value in originals.items():
        assert same(restarted.get(A, key), value)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corrupt_extents_are_never_served_and_reported_missing(tmp_path: Path, damage: str) -> None:
    disk = PackedKVStore(tmp_path)
    key, neighbour = FactKey.for_fact(A, "f", 1, CFG), FactKey.for_fact(A, "g", 1, CFG)
    disk.put_many([(neighbour, kv(1)), (key, kv(0))])
    extent = disk.locate(key)
    assert extent is not None
    path = disk.log(A).directory / segment_name(extent.segment)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[extent.offset + extent.length - 80] ^= 0xFF  # inside the values
    else:
        data = data[: extent.offset + extent.length // 2]
    path.write_bytes(bytes(data))

    store = InMemoryKVStore(PackedKVStore(tmp_path))
    assert store.get(A, key) is None  # detected: it will be re-encoded
    assert not store.contains_all(A, [key]) and not PackedKVStore(tmp_path).exists(key)
    assert files_holding(tmp_path, kv(0)) == []
    assert same(store.get(A, neighbour), kv(1))


def test_delete_then_read_returns_nothing_and_no_byte_remains(tmp_path: Path) -> None:
    store = InMemoryKVStore(PackedKVStore(tmp_path, SMALL))
    keys = [FactKey.for_fact(A, f"f{i}", 1, CFG) for i in range(6)]
    store.put_many(A, [(k, kv(i, tokens=40)) for i, k in enumerate(keys)])
    assert files_holding(tmp_path, kv(2, tokens=40)) != []  # the probe finds what is there
    assert store.delete_many(A, [keys[2], keys[4]]) == 2
    for gone in (2, 4):
        assert store.get(A, keys[gone]) is None
        assert PackedKVStore(tmp_path).get(keys[gone]) is None  # nor from another process
        assert files_holding(tmp_path, kv(gone, tokens=40)) == []
    assert all(same(store.get(A, keys[i]), kv(i, tokens=40)) for i in (0, 1, 3, 5))


def test_tenants_are_apart_and_a_tenant_delete_drops_its_files(tmp_path: Path) -> None:
    store = InMemoryKVStore(PackedKVStore(tmp_path))
    ka, kb = FactKey.for_fact(A, "f", 1, CFG), FactKey.for_fact(B, "f", 1, CFG)
    store.put(A, ka, kv(1))
    store.put(B, kb, kv(2))
    assert store.delete(A, ka)
    assert store.get(A, ka) is None and same(store.get(B, kb), kv(2))
    store.delete_tenant(B)
    assert store.keys(B) == [] and PackedKVStore(tmp_path).keys(B) == []
    assert files_holding(tmp_path, kv(2)) == []
    with pytest.raises(ValueError):
        PackedKVStore(tmp_path).delete_many(A, [kb])


def test_background_compaction_gives_space_back(tmp_path: Path) -> None:
    disk = PackedKVStore(tmp_path, SMALL)
    keys = [FactKey.for_fact(A, f"f{i}", 1, CFG) for i in range(40)]
    disk.put_many([(k, kv(i, tokens=40)) for i, k in enumerate(keys)])  # ~8 KiB each
    before = disk.usage(A)
    disk.delete_many(A, [k for i, k in enumerate(keys) if i % 5])
    compactor = disk._compactor
    assert compactor is not None
    deadline = time.monotonic() + 30
    while not compactor.idle() and time.monotonic() < deadline:
        time.sleep(0.05)
    after = disk.usage(A)
    assert after["disk_facts"] == 8 and after["disk_bytes"] == before["disk_bytes"] // 5
    assert after["disk_segment_bytes"] < before["disk_segment_bytes"] / 2
    restarted = PackedKVStore(tmp_path)
    assert all(same(restarted.get(k), kv(i, tokens=40)) for i, k in enumerate(keys) if i % 5 == 0)
    disk.close()


def test_a_file_of_the_previous_layout_is_removed_on_delete(tmp_path: Path) -> None:
    key = FactKey.for_fact(A, "old", 1, CFG)
    FilePerFactKVStore(tmp_path).put(key, kv(9))
    store = PackedKVStore(tmp_path)
    assert store.get(key) is None  # never served from the old layout (re-encoded instead)
    assert files_holding(tmp_path, kv(9)) != []
    store.delete(key)
    assert files_holding(tmp_path, kv(9)) == []


def test_optional_sha256_verification_agrees(tmp_path: Path) -> None:
    key = FactKey.for_fact(A, "f", 1, CFG)
    PackedKVStore(tmp_path).put(key, kv(3))
    assert same(PackedKVStore(tmp_path, verify_checksum=True).get(key), kv(3))
