"""Layout adapters: the calibrated CPU reader against vLLM's own write op; flash; refusals."""

from __future__ import annotations

import pytest
import torch

from gpu_runtime.errors import UnsupportedLayoutError
from gpu_runtime.layouts import CacheGeometry, CpuPackedLayout, FlashLogicalLayout, layout_for


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
