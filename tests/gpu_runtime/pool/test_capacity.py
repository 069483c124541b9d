"""FP8 facts in the tiered pool: at equal bytes the GPU tier holds twice the facts (real pool,
the runtime's default slab size, LoCoMo's mean fact length), and they come back exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu_runtime.pool.arena import pack
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.quant import quantize
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

T = TenantId("t")
SLAB = 1 << 18  # INFERSCALE_POOL_SLAB_BYTES' default
TOKENS = 19  # a LoCoMo fact's mean length in tokens
SHAPES = {"SmolLM2-135M": (30, 3, 64), "Llama-3.1-8B": (32, 8, 128)}  # layers, kv heads, dims


def fact(shape: tuple[int, int, int], fp8: bool, seed: int) -> FactKV:
    layers, heads, dims = shape
    g = torch.Generator().manual_seed(seed)
    k, v = (torch.randn(layers, TOKENS, heads, dims, generator=g) for _ in range(2))
    positions = torch.arange(TOKENS)
    if not fp8:
        return FactKV.build(k.bfloat16(), v.bfloat16(), positions)
    (qk, sk), (qv, sv) = quantize(k), quantize(v)
    return FactKV.build(qk, qv, positions, sk, sv)


def gpu_facts(root: Path, shape: tuple[int, int, int], fp8: bool, budget: int) -> int:
    """How many facts the GPU tier of a pool with ``budget`` bytes holds once full."""
    pool = TieredKVPool.create(root, budget, 0, SLAB)
    one = pack(fact(shape, fp8, 0))[1].nbytes
    offered = 3 * budget // one + 2  # more than fit: the rest go to disk
    for i in range(offered):
        pool.put(T, FactKey.for_fact(T, f"f{i}", 1, EncodingConfig("m", 0, 1)), fact(shape, fp8, i))
    stats = pool.stats()
    assert stats["gpu_entries"] < offered and stats["gpu_slab_bytes"] <= budget
    return int(stats["gpu_entries"])


@pytest.mark.parametrize("model", SHAPES)
def test_fp8_facts_double_the_gpu_tier_at_equal_bytes(tmp_path: Path, model: str) -> None:
    shape = SHAPES[model]
    bf16_bytes = pack(fact(shape, False, 0))[1].nbytes
    fp8_bytes = pack(fact(shape, True, 0))[1].nbytes
    # 1 byte per element plus a float32 scale per head_dim elements, against 2 bytes
    assert bf16_bytes / fp8_bytes > 1.85
    budget = 16 << 20
    bf16 = gpu_facts(tmp_path / "bf16", shape, False, budget)
    fp8 = gpu_facts(tmp_path / "fp8", shape, True, budget)
    assert bf16 >= 4
    assert fp8 >= 2 * bf16  # slabs of 256 KiB round both up: here exactly twice


def test_fp8_facts_come_back_from_every_tier_bit_for_bit(tmp_path: Path) -> None:
    shape = (4, 2, 32)
    pool = TieredKVPool.create(tmp_path, 6 << 12, 6 << 12, 1 << 12)  # 2 facts a tier
    originals = {FactKey.for_fact(T, f"f{i}", 1, EncodingConfig("m", 0, 1)): fact(shape, True, i)
                 for i in range(6)}  # fmt: skip
    for key, kv in originals.items():
        pool.put(T, key, kv)
    stats = pool.stats(T)
    assert stats["gpu_entries"] and stats["host_entries"] and stats["disk_entries"]
    for key, kv in originals.items():
        got = pool.get(T, key)
        assert got is not None and got.verify() and got.scaled
        assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                   for a, b in zip(got.tensors, kv.tensors, strict=True))  # fmt: skip
