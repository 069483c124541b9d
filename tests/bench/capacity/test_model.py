"""The capacity model's byte and slab arithmetic is what the real pool packs and allocates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.capacity import model
from bench.capacity.shapes import (
    BF16,
    FP8_E4M3,
    KVDType,
    ModelShape,
    fact_bytes,
    shape_named,
    slab_rounded_bytes,
)
from gpu_runtime.pool.arena import pack
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.quant import quantize
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

T = TenantId("t")
SMALL = ModelShape("small", 2, 3, 16)
SLAB = 4096


def fact(shape: ModelShape, dtype: KVDType, tokens: int, seed: int = 0) -> FactKV:
    g = torch.Generator().manual_seed(seed)
    dims = (shape.layers, tokens, shape.kv_heads, shape.head_dim)
    k, v = (torch.randn(*dims, generator=g) for _ in range(2))
    positions = torch.arange(tokens)
    if not dtype.scaled:
        return FactKV.build(k.bfloat16(), v.bfloat16(), positions)
    (qk, sk), (qv, sv) = quantize(k), quantize(v)
    return FactKV.build(qk, qv, positions, sk, sv)


@pytest.mark.parametrize("dtype", [BF16, FP8_E4M3], ids=lambda d: d.name)
@pytest.mark.parametrize("tokens", [1, 7, 19, 40])
def test_fact_bytes_is_the_real_packing(dtype: KVDType, tokens: int) -> None:
    assert fact_bytes(SMALL, dtype, tokens) == pack(fact(SMALL, dtype, tokens))[1].nbytes


@pytest.mark.parametrize("dtype", [BF16, FP8_E4M3], ids=lambda d: d.name)
def test_slab_rounding_and_tier_facts_are_what_the_real_pool_holds(
    tmp_path: Path, dtype: KVDType
) -> None:
    tokens, budget = 19, 10 * SLAB + 100  # a remainder under one slab is never used
    kv = fact(SMALL, dtype, tokens)
    pool = TieredKVPool.create(tmp_path, budget, 0, SLAB)
    config = EncodingConfig("m", 0, 1)
    one = fact_bytes(SMALL, dtype, tokens)
    for i in range(3 * budget // one + 2):  # more than fit: the rest stay on disk
        pool.put(T, FactKey.for_fact(T, f"f{i}", 1, config), kv)
    stats = pool.stats()
    rounded = slab_rounded_bytes(SMALL, dtype, tokens, SLAB)
    assert stats["gpu_slab_bytes"] == stats["gpu_entries"] * rounded
    assert stats["gpu_entries"] == model.tier_facts(budget, rounded // SLAB, SLAB)
    assert stats["disk_entries"] > 0


def test_fp8_doubles_the_facts_per_tier_where_slabs_allow() -> None:
    llama = shape_named("Llama-3.1-8B")
    bf16, fp8 = model.capacity(llama, BF16), model.capacity(llama, FP8_E4M3)
    assert (bf16.slabs_per_fact, fp8.slabs_per_fact) == (10, 5)
    assert fp8.gpu_facts == 2 * bf16.gpu_facts and fp8.host_facts == 2 * bf16.host_facts
    # a shape where rounding eats part of the gain: 5 slabs against 3
    qwen = shape_named("Qwen2.5-7B")
    ratio = model.capacity(qwen, FP8_E4M3).gpu_facts / model.capacity(qwen, BF16).gpu_facts
    assert 1.6 < ratio < 1.7


def test_h200_llama_bf16_figures() -> None:
    row = model.capacity(shape_named("Llama-3.1-8B"), BF16)
    # 2 x 32 layers x 19 tokens x 8 heads x 128 dims x 2 B + 19 int64 positions
    assert row.fact_bytes == 2 * 32 * 19 * 8 * 128 * 2 + 19 * 8
    assert row.gpu_facts == (60 << 30) // (1 << 18) // 10


def test_a_length_spread_changes_the_mean_slabs() -> None:
    lengths = model.poisson_lengths()
    mean = sum(n * p for n, p in lengths.items()) / sum(lengths.values())
    assert abs(mean - model.LOCOMO_MEAN_TOKENS) < 0.05
    slabs = model.mean_slabs(shape_named("Llama-3.1-8B"), BF16, lengths)
    assert 9.5 < slabs < 11
