"""FactKV: one fact's KV for every layer, with the positions its keys were rotated at.

Keys are kept exactly as captured (rotated at ``positions``) rather than un-rotated: ``R(-p) k``
is the fact's pre-RoPE key, recovered on demand in float32 by ``RopeRotator.unrotate``, so this
is a lossless encoding of the pre-RoPE form. It also makes re-injection at the capture positions
bit-exact (no rotation at all) and halves key storage compared with float32 pre-RoPE keys;
injection anywhere else rotates by ``R(target) R(-p)``.

Keys and values are in the cache dtype as captured, or FP8 with float32 scales per token and KV
head (``store/quant.py``): then ``key_scales``/``value_scales`` are set and the float32 KV is
``dequantize(keys, key_scales)``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from gpu_runtime.store.quant import dequantize, is_fp8


@dataclass(frozen=True)
class FactKV:
    keys: torch.Tensor  # [layers, n_tokens, kv_heads, head_dim] rotated at positions
    values: torch.Tensor  # [layers, n_tokens, kv_heads, head_dim]
    positions: torch.Tensor  # [n_tokens] int64: where each key was rotated to when captured
    checksum: str
    key_scales: torch.Tensor | None = None  # [layers, n_tokens, kv_heads] float32 (FP8 only)
    value_scales: torch.Tensor | None = None  # [layers, n_tokens, kv_heads] float32 (FP8 only)

    @classmethod
    def build(
        cls,
        keys: torch.Tensor,
        values: torch.Tensor,
        positions: torch.Tensor,
        key_scales: torch.Tensor | None = None,
        value_scales: torch.Tensor | None = None,
    ) -> FactKV:
        if keys.shape != values.shape or keys.dim() != 4 or keys.dtype != values.dtype:
            raise ValueError(
                f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must both "
                "be [layers, n_tokens, kv_heads, head_dim] of one dtype"
            )
        if positions.shape != (keys.shape[1],):
            raise ValueError(f"positions must be [{keys.shape[1]}], got {tuple(positions.shape)}")
        if (key_scales is None) != (value_scales is None) or is_fp8(keys.dtype) != (
            key_scales is not None
        ):
            raise ValueError("FP8 keys and values need float32 scales, and only they take them")
        k, v = keys.contiguous(), values.contiguous()
        p = positions.to(torch.int64).contiguous()
        if key_scales is None or value_scales is None:
            return cls(k, v, p, checksum_of(k, v, p))
        rows = tuple(keys.shape[:3])
        if tuple(key_scales.shape) != rows or tuple(value_scales.shape) != rows:
            raise ValueError(f"scales must be {list(rows)} (layers, n_tokens, kv_heads)")
        ks = key_scales.to(torch.float32).contiguous()
        vs = value_scales.to(torch.float32).contiguous()
        return cls(k, v, p, checksum_of(k, v, p, ks, vs), ks, vs)

    @property
    def n_tokens(self) -> int:
        return int(self.keys.shape[1])

    @property
    def scaled(self) -> bool:
        return self.key_scales is not None

    @property
    def tensors(self) -> tuple[torch.Tensor, ...]:
        """Everything stored: keys, values, positions, then the scales of a scaled fact."""
        base = (self.keys, self.values, self.positions)
        if self.key_scales is None or self.value_scales is None:
            return base
        return (*base, self.key_scales, self.value_scales)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)

    def verify(self) -> bool:
        return checksum_of(*self.tensors) == self.checksum

    def dequantized(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values as float32 [layers, n_tokens, kv_heads, head_dim]."""
        if self.key_scales is None or self.value_scales is None:
            return self.keys.to(torch.float32), self.values.to(torch.float32)
        return dequantize(self.keys, self.key_scales), dequantize(self.values, self.value_scales)


def checksum_of(*tensors: torch.Tensor) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(str(tensor.dtype).encode())
        digest.update(repr(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
