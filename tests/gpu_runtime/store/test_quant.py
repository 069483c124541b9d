"""FP8 fact KV arithmetic: quantize / dequantize error bounds and scales, saturation, and the
codec between caches and stored facts (capture; re-rotation in float32, then re-quantization
at the layer's cache scale; rows copied as they are only where that is exact)."""

from __future__ import annotations

import pytest
import torch

from gpu_runtime.connector.codec import CacheFormat, FactCodec
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.quant import (
    FP8_MAX,
    FactDType,
    cache_fp8_dtype,
    dequantize,
    layer_scales,
    quantize,
    quantize_at,
)
from tests.gpu_runtime.test_rope import table

pytestmark = pytest.mark.unit

E4M3 = torch.float8_e4m3fn
L, N, H, D = 3, 7, 2, 16


def rows(seed: int, spread: float = 4.0) -> torch.Tensor:
    """[L, N, H, D] float32 whose rows differ in magnitude by up to ``2 ** spread``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(L, N, H, D, generator=g)
    return x * torch.exp2(spread * torch.rand(L, N, H, 1, generator=g) - spread / 2)


def rotator() -> RopeRotator:
    return RopeRotator(table(256, D), D, D, True)


def test_round_trip_error_is_within_half_an_e4m3_step_of_each_element() -> None:
    x = rows(0, spread=12.0)
    q, scales = quantize(x)
    assert q.dtype == E4M3 and scales.dtype == torch.float32 and scales.shape == (L, N, H)
    back = dequantize(q, scales)
    # 3 mantissa bits: half a step is 2**-4 of the value; below e4m3's smallest normal (2**-6
    # of the scale) the step is fixed at 2**-9 of the scale.
    bound = torch.maximum(x.abs() * 2.0**-4, scales[..., None] * 2.0**-10)
    assert bool(((back - x).abs() <= bound * (1 + 1e-6)).all())
    relative = (back - x).norm() / x.norm()
    assert 1e-3 < float(relative) < 2.0**-4  # lossy, and about as lossy as e4m3 is


def test_each_row_gets_its_own_scale_and_its_largest_element_maps_to_448() -> None:
    x = rows(1, spread=20.0)
    q, scales = quantize(x)
    torch.testing.assert_close(scales, x.abs().amax(-1) / 448.0, rtol=0, atol=0)
    assert bool((q.float().abs().amax(-1) == 448.0).all())
    # a per-tensor scale would flush the smallest rows; per-row scales keep every row's shape
    _, small = torch.min(x.abs().amax(-1).flatten(), 0)
    row = x.flatten(0, 2)[small]
    kept = dequantize(q, scales).flatten(0, 2)[small]
    assert float((kept - row).norm() / row.norm()) < 2.0**-4


def test_zero_rows_and_saturation() -> None:
    x = torch.zeros(1, 2, 1, D)
    x[0, 1] = torch.linspace(-3, 3, D)
    q, scales = quantize(x)
    assert float(scales[0, 0, 0]) == 1.0 and not q[0, 0].float().any()
    over = quantize_at(torch.tensor([[1e6, -1e6, 447.0, 0.5]]), torch.ones(1), E4M3)
    assert over.float().tolist() == [[448.0, -448.0, 448.0, 0.5]]
    assert FP8_MAX[torch.float8_e5m2] == 57344.0


def test_cache_dtypes_map_to_fp8_types_and_others_are_refused() -> None:
    assert cache_fp8_dtype("auto") is None
    assert cache_fp8_dtype("fp8") == cache_fp8_dtype("fp8_e4m3") == E4M3
    assert cache_fp8_dtype("fp8_e5m2") == torch.float8_e5m2
    with pytest.raises(ValueError, match="not supported"):
        cache_fp8_dtype("int8_per_token_head")


def test_capture_into_fp8_storage_from_a_float_cache() -> None:
    x, v = rows(2), rows(3)
    positions = torch.arange(40, 40 + N)
    codec = FactCodec(CacheFormat(torch.float32), FactDType.FP8_E4M3, rotator())
    fact = codec.capture(x, v, positions)
    assert fact.keys.dtype == E4M3 and fact.scaled and fact.verify()
    assert fact.nbytes == 2 * x.numel() + 2 * 4 * L * N * H + 8 * N  # 1 byte + 4 / D each
    keys, values = fact.dequantized()
    torch.testing.assert_close(keys, x, rtol=2.0**-4, atol=1e-3)
    torch.testing.assert_close(values, v, rtol=2.0**-4, atol=1e-3)
    as_captured = FactCodec(CacheFormat(torch.float32), FactDType.AUTO, rotator())
    kept = as_captured.capture(x, v, positions)
    assert not kept.scaled and torch.equal(kept.keys, x)


def test_float_cache_gets_dequantized_keys_rotated_in_float32() -> None:
    """Into a 16/32-bit cache: dequantize, then chunked RoPE in float32, then one cast; moved
    keys are as close to the exactly rotated originals as quantization allows (rotation keeps
    each pair's norm, so it cannot grow the error)."""
    rot = rotator()
    x = rows(4)
    source = torch.arange(10, 10 + N)
    target = torch.arange(100, 100 + N)
    (qk, sk), (qv, sv) = quantize(x), quantize(x)
    codec = FactCodec(CacheFormat(torch.float32), FactDType.FP8_E4M3, rot)
    keys, values = codec.to_cache(qk, qv, sk, sv, source, target)
    assert keys.dtype == values.dtype == torch.float32
    assert torch.equal(values, dequantize(qv, sv))
    exact = rot.move(x.flatten(0, 1), source.repeat(L), target.repeat(L)).view_as(x)
    error = (keys - exact).norm(dim=-1)  # per row
    assert bool((error <= (dequantize(qk, sk) - x).norm(dim=-1) * (1 + 1e-5) + 1e-6).all())
    in_place, _ = codec.to_cache(qk, qv, sk, sv, source, source)
    assert torch.equal(in_place, dequantize(qk, sk))  # no rotation at all where it stays
    bf16 = FactCodec(CacheFormat(torch.bfloat16), FactDType.FP8_E4M3, rot)
    assert torch.equal(bf16.to_cache(qk, qv, sk, sv, source, target)[0], keys.bfloat16())


def fp8_cache() -> CacheFormat:
    return CacheFormat(E4M3, torch.tensor([0.05, 0.02, 0.11]), torch.tensor([0.03, 0.5, 0.07]))


def test_fp8_cache_capture_keeps_its_bits_at_the_layer_scales() -> None:
    cache = fp8_cache()
    assert cache.key_scales is not None and cache.value_scales is not None
    bits = quantize_at(rows(5), torch.full((L, N, H), 0.05), E4M3)
    codec = FactCodec(cache, FactDType.AUTO, rotator())
    fact = codec.capture(bits, bits, torch.arange(N))
    assert torch.equal(fact.keys.view(torch.uint8), bits.view(torch.uint8))
    assert fact.key_scales is not None and fact.value_scales is not None
    assert torch.equal(fact.key_scales, layer_scales(cache.key_scales, N, H))
    assert torch.equal(fact.value_scales, layer_scales(cache.value_scales, N, H))
    same = FactCodec(cache, FactDType.FP8_E4M3, rotator()).capture(bits, bits, torch.arange(N))
    assert torch.equal(same.keys.view(torch.uint8), bits.view(torch.uint8))


def test_e5m2_cache_is_stored_as_e4m3_with_row_scales() -> None:
    cache = CacheFormat(torch.float8_e5m2, torch.full((L,), 0.25), torch.full((L,), 0.5))
    bits = quantize_at(rows(6), torch.full((L, N, H), 0.25), torch.float8_e5m2)
    fact = FactCodec(cache, FactDType.FP8_E4M3, rotator()).capture(bits, bits, torch.arange(N))
    assert fact.keys.dtype == E4M3
    keys, _ = fact.dequantized()
    wide = dequantize(bits, torch.full((L, N, H), 0.25))
    torch.testing.assert_close(keys, wide, rtol=2.0**-4, atol=1e-3)


def test_fp8_cache_copies_rows_in_place_and_requantizes_moved_rows_at_the_layer_scale() -> None:
    cache = fp8_cache()
    assert cache.key_scales is not None and cache.value_scales is not None
    rot = rotator()
    codec = FactCodec(cache, FactDType.AUTO, rot)
    ks = layer_scales(cache.key_scales, N, H)
    vs = layer_scales(cache.value_scales, N, H)
    k_bits = quantize_at(rows(7), ks, E4M3)
    v_bits = quantize_at(rows(8), vs, E4M3)
    source = torch.arange(30, 30 + N)
    target = source.clone()
    target[3:] += 50  # the first three tokens stay, the rest move

    keys, values = codec.to_cache(k_bits, v_bits, ks, vs, source, target)
    raw = keys.view(torch.uint8)
    assert torch.equal(values.view(torch.uint8), v_bits.view(torch.uint8))
    assert torch.equal(raw[:, :3], k_bits.view(torch.uint8)[:, :3])  # bit-exact in place
    moved = rot.move(dequantize(k_bits, ks).flatten(0, 1), source.repeat(L), target.repeat(L))
    expected = quantize_at(moved.view(L, N, H, D), ks, E4M3)  # float32 RoPE, then requantize
    assert torch.equal(raw[:, 3:], expected.view(torch.uint8)[:, 3:])
    assert not torch.equal(raw[:, 3:], k_bits.view(torch.uint8)[:, 3:])

    # Facts with scales of their own (stored as e4m3 per row) are requantized at the layer's.
    (qk, sk), (qv, sv) = quantize(rows(9)), quantize(rows(10))
    keys, values = codec.to_cache(qk, qv, sk, sv, source, source)
    assert torch.equal(
        keys.view(torch.uint8), quantize_at(dequantize(qk, sk), ks, E4M3).view(torch.uint8)
    )
    assert torch.equal(
        values.view(torch.uint8), quantize_at(dequantize(qv, sv), vs, E4M3).view(torch.uint8)
    )
    with pytest.raises(ValueError, match="unscaled"):
        codec.to_cache(rows(1), rows(1), None, None, source, source)


@pytest.mark.parametrize("stored", [FactDType.FP8_E4M3, FactDType.AUTO])
def test_the_codecs_row_bytes_are_the_rows_a_stored_fact_is_made_of(stored: FactDType) -> None:
    codec = FactCodec(CacheFormat(torch.bfloat16), stored, rotator())
    fact = codec.capture(rows(2).bfloat16(), rows(3).bfloat16(), torch.arange(N))
    row, scale_row = codec.row_bytes(H, D)
    assert row == fact.keys[0, 0].numel() * fact.keys.element_size()  # one layer, one token
    scales = fact.key_scales
    assert scale_row == (0 if scales is None else scales[0, 0].numel() * scales.element_size())
    assert (scale_row > 0) == (stored is FactDType.FP8_E4M3)
