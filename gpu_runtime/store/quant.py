"""FP8 fact KV: the storage formats a fact can take, and the arithmetic between them.

A fact is stored either in its engine's cache dtype, as captured (``FactDType.AUTO``), or as
FP8 e4m3 with float32 scales per token and KV head (``FactDType.FP8_E4M3``): each row of
``head_dim`` elements is divided by ``amax(|row|) / 448`` and rounded to nearest (ties to even),
so the row's largest element maps to e4m3's largest finite value and every element keeps 3
mantissa bits (relative error at most 2**-4, half a step). Scales are per row, not per tensor,
so one outlier token or head never costs the others their precision.

Facts captured from an FP8 cache keep the cache's bits and carry the layer's own (per-tensor)
scale in every row, so they can be copied back as they are. Every conversion here goes through
float32: ``dequantize`` is exact (an e4m3 value times a float32 scale), ``quantize_at`` divides
by the target scale, saturates at the format's largest finite value and rounds to nearest even,
as vLLM's FP8 cache write does.
"""

from __future__ import annotations

import enum

import torch

FP8_DTYPES: dict[str, torch.dtype] = {
    "fp8": torch.float8_e4m3fn,  # vLLM's "fp8" on NVIDIA GPUs (ROCm's fnuz is not served)
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
FP8_MAX: dict[torch.dtype, float] = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


class FactDType(enum.StrEnum):
    """How facts are stored in every tier (``INFERSCALE_FACT_KV_DTYPE``)."""

    AUTO = "auto"  # the engine's cache dtype, exactly as captured
    FP8_E4M3 = "fp8_e4m3"  # e4m3 with float32 scales per token and KV head


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_MAX


def cache_fp8_dtype(cache_dtype: str) -> torch.dtype | None:
    """The element type of a vLLM ``kv_cache_dtype`` (``None``: the model dtype, unquantized);
    raises for quantized caches whose layout we have not verified (int8, per-token-head)."""
    if cache_dtype == "auto":
        return None
    if cache_dtype not in FP8_DTYPES:
        raise ValueError(f"kv cache dtype {cache_dtype!r} is not supported for injection")
    return FP8_DTYPES[cache_dtype]


def quantize(
    x: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (q [..., D] in ``dtype``, scales [...] float32): one scale per row."""
    wide = x.to(torch.float32)
    amax = wide.abs().amax(dim=-1)  # [...]
    scales = torch.where(amax > 0, amax / FP8_MAX[dtype], torch.ones_like(amax))
    return quantize_at(wide, scales, dtype), scales


def quantize_at(x: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """x [..., D] float32 at given ``scales`` (broadcast over [...]) -> [..., D] ``dtype``:
    x / scale, saturated at the largest finite value, rounded to nearest even."""
    limit = FP8_MAX[dtype]
    scaled = x.to(torch.float32) / scales.to(torch.float32).unsqueeze(-1)
    return scaled.clamp(-limit, limit).to(dtype)


def dequantize(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """q [..., D] (FP8) and scales [...] -> float32 [..., D] (exact)."""
    return q.to(torch.float32) * scales.to(torch.float32).unsqueeze(-1)


def layer_scales(scales: torch.Tensor, n_tokens: int, kv_heads: int) -> torch.Tensor:
    """Per-layer (per-tensor) cache scales [L] as per-row fact scales [L, n, H]."""
    flat = scales.to(torch.float32).view(-1, 1, 1)
    return flat.expand(-1, n_tokens, kv_heads).contiguous()
