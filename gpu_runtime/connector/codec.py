"""FactCodec: between what an engine's KV cache holds and how its facts are stored.

Captures turn the cache's KV into a ``FactKV`` in the runtime's storage format; loads (the
PyTorch path; the fused kernel does the same arithmetic) turn stored facts back into what the
cache holds at the prompt positions they are injected at:

* 16/32-bit cache, facts as captured: keys re-rotated where they move (untouched, so bit-exact,
  where they stay), values as they are;
* 16/32-bit cache, FP8 facts: dequantized to float32, keys re-rotated there, cast once;
* FP8 cache: a row (one token, head and layer) is copied as it is when the fact holds the
  cache's FP8 type at the layer's own scale and, for keys, stays at its capture position (so
  facts captured from this cache and injected in place are bit-exact); any other row is
  dequantized, re-rotated in float32 and quantized with the layer's cache scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.quant import (
    FactDType,
    dequantize,
    is_fp8,
    layer_scales,
    quantize,
    quantize_at,
)


@dataclass(frozen=True)
class CacheFormat:
    """The element type attention reads from the cache, and an FP8 cache's per-layer scales."""

    dtype: torch.dtype  # the model dtype, or an FP8 type (stored as uint8 by vLLM)
    key_scales: torch.Tensor | None = None  # [L] float32, layer order: FP8 caches only
    value_scales: torch.Tensor | None = None  # [L] float32

    def __post_init__(self) -> None:
        if is_fp8(self.dtype) != (self.key_scales is not None and self.value_scales is not None):
            raise ValueError("an FP8 cache needs its per-layer scales, and only it has them")

    @property
    def fp8(self) -> bool:
        return is_fp8(self.dtype)

    @classmethod
    def of_layers(
        cls, dtype: torch.dtype, layers_in_order: list[Any], device: torch.device
    ) -> CacheFormat:
        """The cache's element type and, for FP8, each attention layer's K and V scale in layer
        order (checkpoint scales are loaded with the weights, before the caches register)."""
        if not is_fp8(dtype):
            return cls(dtype)
        k = [float(layer._k_scale_float) for layer in layers_in_order]
        v = [float(layer._v_scale_float) for layer in layers_in_order]
        as_tensor = torch.tensor  # [L] float32 each
        return cls(dtype, as_tensor(k, dtype=torch.float32).to(device),
                   as_tensor(v, dtype=torch.float32).to(device))  # fmt: skip


class FactCodec:
    def __init__(self, cache: CacheFormat, stored: FactDType, rotator: RopeRotator) -> None:
        self.cache = cache
        self.stored = stored
        self.rotator = rotator

    @property
    def fact_dtype(self) -> torch.dtype:
        """The dtype every fact of this engine is stored in."""
        if self.stored is FactDType.FP8_E4M3:
            return torch.float8_e4m3fn
        return self.cache.dtype

    def row_bytes(self, kv_heads: int, head_size: int) -> tuple[int, int]:
        """Bytes of one stored row (one token's K or V for one layer) and of its float32 scales
        (FP8 facts; 0 otherwise): the units a fact's blob is read in (``kernels.inject``)."""
        size = torch.tensor([], dtype=self.fact_dtype).element_size()
        return kv_heads * head_size * size, 4 * kv_heads if is_fp8(self.fact_dtype) else 0

    # ---- captures ------------------------------------------------------------------------
    def capture(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> FactKV:
        """keys, values [L, n, H, D] as the cache holds them; positions [n] -> the stored fact."""
        cache = self.cache
        if cache.key_scales is None or cache.value_scales is None:
            if self.stored is FactDType.AUTO:
                return FactKV.build(keys, values, positions)
            (qk, sk), (qv, sv) = quantize(keys), quantize(values)
            return FactKV.build(qk, qv, positions, sk, sv)
        n, heads = keys.shape[1], keys.shape[2]
        ks = layer_scales(cache.key_scales.to(keys.device), n, heads)  # [L, n, H]
        vs = layer_scales(cache.value_scales.to(keys.device), n, heads)
        if keys.dtype == self.fact_dtype:  # the cache's bits, at the layer's scale
            return FactKV.build(keys, values, positions, ks, vs)
        (qk, sk), (qv, sv) = quantize(dequantize(keys, ks)), quantize(dequantize(values, vs))
        return FactKV.build(qk, qv, positions, sk, sv)

    # ---- loads ---------------------------------------------------------------------------
    def to_cache(
        self,
        keys: torch.Tensor,  # [L, n, H, D] stored dtype, rotated at ``source``
        values: torch.Tensor,  # [L, n, H, D]
        key_scales: torch.Tensor | None,  # [L, n, H] float32 (FP8 facts)
        value_scales: torch.Tensor | None,
        source: torch.Tensor,  # [n] int64: capture positions
        target: torch.Tensor,  # [n] int64: positions in this prompt
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What the cache must hold for these tokens: keys and values [L, n, H, D] in the
        cache's element type, keys rotated at ``target``."""
        moved = source != target  # [n]
        dtype = self.cache.dtype
        if key_scales is None or value_scales is None:
            if self.cache.fp8:
                raise ValueError("unscaled facts cannot be written into an FP8 cache")
            if bool(moved.any()):
                keys = self._move(keys, source, target)
            return keys.to(dtype), values.to(dtype)
        k32 = dequantize(keys, key_scales)  # [L, n, H, D] float32
        v32 = dequantize(values, value_scales)
        if bool(moved.any()):
            k32 = self._move(k32, source, target)
        cache_k, cache_v = self.cache.key_scales, self.cache.value_scales
        if cache_k is None or cache_v is None:
            return k32.to(dtype), v32.to(dtype)
        layer_k = cache_k.to(keys.device).view(-1, 1, 1).expand_as(key_scales)  # [L, n, H]
        layer_v = cache_v.to(keys.device).view(-1, 1, 1).expand_as(value_scales)
        if keys.dtype != dtype:  # another FP8 type: every row is quantized afresh
            return quantize_at(k32, layer_k, dtype), quantize_at(v32, layer_v, dtype)
        keep_k = (key_scales == layer_k) & ~moved.to(keys.device)[None, :, None]  # [L, n, H]
        keep_v = value_scales == layer_v
        return _select(keep_k, keys, k32, layer_k), _select(keep_v, values, v32, layer_v)

    def _move(self, keys: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Chunked RoPE in float32: keys [L, n, H, D] rotated at ``source`` -> at ``target``."""
        n_layers = keys.shape[0]
        flat = keys.flatten(0, 1)  # [L*n, H, D]: one rotation call for every layer
        moved = self.rotator.move(flat, source.repeat(n_layers), target.repeat(n_layers))
        return moved.view(keys.shape)  # float32


def _select(
    keep: torch.Tensor, stored: torch.Tensor, wide: torch.Tensor, scales: torch.Tensor
) -> torch.Tensor:
    """Per row [L, n, H]: the stored FP8 bits where ``keep``, else ``wide`` (float32) quantized
    at the cache's ``scales`` [L, n, H] into the same FP8 type."""
    if bool(keep.all()):
        return stored
    fresh = quantize_at(wide, scales, stored.dtype)
    bits = torch.where(keep[..., None], stored.view(torch.uint8), fresh.view(torch.uint8))
    return bits.view(stored.dtype)
