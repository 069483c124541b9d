"""FactKV integrity and the in-memory store's tenant partitioning."""

from __future__ import annotations

import pytest
import torch

from gpu_runtime.errors import TenantMismatchError
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.memory import InMemoryKVStore
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 2, 1)


def kv(n: int = 3) -> FactKV:
    return FactKV.build(
        torch.randn(2, n, 1, 4).bfloat16(), torch.randn(2, n, 1, 4).bfloat16(), torch.arange(n)
    )


def test_checksum_detects_any_change() -> None:
    item = kv()
    assert item.verify()
    item.values[0, 0, 0, 0] += 1
    assert not item.verify()


def test_shapes_are_validated() -> None:
    with pytest.raises(ValueError):
        FactKV.build(torch.zeros(2, 3, 1, 4), torch.zeros(2, 3, 1, 5), torch.arange(3))
    with pytest.raises(ValueError, match="positions"):
        FactKV.build(torch.zeros(2, 3, 1, 4), torch.zeros(2, 3, 1, 4), torch.arange(2))


def test_store_is_partitioned_by_tenant() -> None:
    store = InMemoryKVStore()
    a, b = TenantId("a"), TenantId("b")
    ka, kb = FactKey.for_fact(a, "f", 1, CFG), FactKey.for_fact(b, "f", 1, CFG)
    store.put(a, ka, kv())
    assert store.contains_all(a, [ka])
    assert not store.contains_all(b, [kb])
    assert store.get(b, kb) is None
    with pytest.raises(TenantMismatchError):
        store.get(b, ka)
    with pytest.raises(TenantMismatchError):
        store.put(b, ka, kv())
    with pytest.raises(TenantMismatchError):
        store.contains_all(b, [ka])
    assert store.delete(a, ka) and not store.contains_all(a, [ka])


def test_keys_distinguish_version_and_config() -> None:
    t = TenantId("t")
    assert FactKey.for_fact(t, "f", 1, CFG) != FactKey.for_fact(t, "f", 2, CFG)
    assert FactKey.for_fact(t, "f", 1, CFG) != FactKey.for_fact(t, "f", 1, EncodingConfig("m", 3))
    assert FactKey.from_wire(FactKey.for_fact(t, "f", 1, CFG).to_wire()) == FactKey.for_fact(
        t, "f", 1, CFG
    )
