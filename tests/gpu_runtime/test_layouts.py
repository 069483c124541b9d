"""Layout adapters: the calibrated CPU reader against vLLM's own write op; flash; refusals."""

from __future__ import annotations

import pytest
import torch

from gpu_runtime.errors import UnsupportedLayoutError
from gpu_runtime.layouts import (
    CacheGeometry,
    CpuPackedLayout,
    FlashLogicalLayout,
    check_layer,
    layout_for,
)


def _roundtrip(layout, n_blocks: int = 4) -> None:  # type: ignore[no-untyped-def]
    g = layout.geometry
    cache = torch.zeros(n_blocks, g.num_kv_heads, g.block_size, 2 * g.head_size, dtype=g.dtype)
    slots = torch.tensor([1, 5, g.block_size + 2, 3 * g.block_size - 1])
    k = torch.randn(len(slots), g.num_kv_heads, g.head_size).to(g.dtype)
    v = torch.randn(len(slots), g.num_kv_heads, g.head_size).to(g.dtype)
    layout.write(cache, slots, k, v)
    rk, rv = layout.read(cache, slots)
    assert torch.equal(rk, k) and torch.equal(rv, v)
    untouched = torch.tensor([0, 2, 2 * g.block_size])
    zk, zv = layout.read(cache, untouched)
    assert not zk.any() and not zv.any()


@pytest.mark.unit
def test_flash_layout_roundtrip_and_positions() -> None:
    layout = FlashLogicalLayout(CacheGeometry(2, 8, 16, torch.bfloat16))
    _roundtrip(layout)
    cache = torch.zeros(2, 2, 16, 16, dtype=torch.bfloat16)
    layout.write(cache, torch.tensor([17]), torch.ones(1, 2, 8), 2 * torch.ones(1, 2, 8))
    assert (cache[1, :, 1, :8] == 1).all() and (cache[1, :, 1, 8:] == 2).all()


@pytest.mark.unit
def test_unknown_backend_is_refused() -> None:
    with pytest.raises(UnsupportedLayoutError, match="not supported"):
        layout_for("TRITON_MLA", CacheGeometry(1, 8, 16, torch.bfloat16))


@pytest.mark.unit
def test_calibration_rejects_an_op_that_is_not_a_permutation() -> None:
    def lossy(key, value, key_cache, value_cache, slots):  # type: ignore[no-untyped-def]
        key_cache.view(-1)[: key.numel()] = 0  # writes every token to the same place

    with pytest.raises(UnsupportedLayoutError):
        CpuPackedLayout(CacheGeometry(1, 8, 32, torch.bfloat16), lossy)


@pytest.mark.engine
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_cpu_layout_inverts_vllms_own_write_kernel(dtype: torch.dtype) -> None:
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    geometry = CacheGeometry(num_kv_heads=3, head_size=64, block_size=128, dtype=dtype)
    isa = _get_attn_isa(dtype, geometry.block_size, geometry.head_size)

    def write(key, value, key_cache, value_cache, slots):  # type: ignore[no-untyped-def]
        ops.cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slots, isa)

    _roundtrip(CpuPackedLayout(geometry, write))


@pytest.mark.unit
def test_flash_fp8_cache_is_bytes_written_and_read_as_e4m3() -> None:
    e4m3 = torch.float8_e4m3fn
    layout = FlashLogicalLayout(CacheGeometry(2, 8, 16, e4m3))
    cache = torch.zeros(4, 2, 16, 16, dtype=torch.uint8)  # as vLLM allocates an FP8 cache
    check_layer(layout, cache, "FLASH_ATTN")
    slots = torch.tensor([1, 17, 40])
    k = (torch.randn(3, 2, 8) * 50).to(e4m3)
    v = (torch.randn(3, 2, 8) * 50).to(e4m3)
    layout.write(cache, slots, k, v)
    rk, rv = layout.read(cache, slots)
    assert rk.dtype == e4m3
    assert torch.equal(rk.view(torch.uint8), k.view(torch.uint8))
    assert torch.equal(rv.view(torch.uint8), v.view(torch.uint8))
    assert torch.equal(cache[1, :, 1, :8], k[1].view(torch.uint8))
    with pytest.raises(ValueError, match="already at its scale"):
        layout.write(cache, slots, torch.randn(3, 2, 8), torch.randn(3, 2, 8))
    with pytest.raises(UnsupportedLayoutError):
        check_layer(layout, cache.view(torch.int8), "FLASH_ATTN")


@pytest.mark.unit
def test_cpu_fp8_cache_is_refused_with_the_way_out() -> None:
    with pytest.raises(UnsupportedLayoutError, match="INFERSCALE_FACT_KV_DTYPE=fp8_e4m3"):
        layout_for("CPU_ATTN", CacheGeometry(3, 64, 128, torch.float8_e4m3fn), lambda *a: None)


@pytest.mark.engine
def test_fp8_facts_reach_the_cpu_cache_dequantized_through_vllms_write_op() -> None:
    """vLLM-CPU's fp32 cache, written by its own op through the PyTorch path: FP8 facts land as
    their float32 dequantization, exactly, in place and (re-rotated) elsewhere."""
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from gpu_runtime.connector.codec import CacheFormat, FactCodec
    from gpu_runtime.connector.metadata import InjectionMetadata, LoadPiece, LoadRequest
    from gpu_runtime.connector.vllm_connector import _cpu_write_op
    from gpu_runtime.connector.worker import WorkerHalf
    from gpu_runtime.rope import RopeRotator
    from gpu_runtime.store.fact_kv import FactKV
    from gpu_runtime.store.memory import InMemoryKVStore
    from gpu_runtime.store.quant import FactDType, dequantize, quantize
    from gpu_runtime.types import EncodingConfig, FactKey, TenantId
    from tests.gpu_runtime.test_rope import table

    geometry = CacheGeometry(num_kv_heads=3, head_size=64, block_size=32, dtype=torch.float32)
    isa = _get_attn_isa(torch.float32, geometry.block_size, geometry.head_size)
    layout = CpuPackedLayout(geometry, _cpu_write_op(isa))
    rot = RopeRotator(table(512, 64), 64, 64, True)
    codec = FactCodec(CacheFormat(torch.float32), FactDType.FP8_E4M3, rot)
    store = InMemoryKVStore()
    half = WorkerHalf(store, rot, layout, codec=codec)
    n_layers, n = 2, 10
    half.register({f"model.layers.{i}.attn": torch.zeros(4, 3, 32, 128) for i in range(n_layers)},
                  "CPU_ATTN")  # fmt: skip
    tenant = TenantId("t")
    key = FactKey.for_fact(tenant, "f", 1, EncodingConfig("m", 0, 1))
    (qk, sk), (qv, sv) = (
        quantize(torch.randn(n_layers, n, 3, 64)),
        quantize(torch.randn(2, n, 3, 64)),
    )
    store.put(tenant, key, FactKV.build(qk, qv, torch.arange(5, 5 + n), sk, sv))
    for position in (5, 40):  # in place, then moved
        load = LoadRequest("r", tenant, (LoadPiece(key, 0, n, position),), (1, 3, 0), 32,
                           position, position + n)  # fmt: skip
        half.start_load(InjectionMetadata(loads=[load]))
        slots = torch.from_numpy(load.slots())
        keys = dequantize(qk, sk)
        if position != 5:
            keys = rot.move(keys.flatten(0, 1), torch.arange(5, 15).repeat(2),
                            torch.arange(40, 50).repeat(2)).view_as(keys)  # fmt: skip
        for layer, name in enumerate(half.layers):
            k, v = layout.read(half._kv[name], slots)
            assert torch.equal(v, dequantize(qv, sv)[layer])
            assert torch.equal(k, keys[layer])
