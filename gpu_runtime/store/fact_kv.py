"""FactKV: one fact's KV for every layer, keys kept before rotary embedding."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FactKV:
    """A fact's stored KV.

    ``keys_pre_rope`` is float32 so that rotating back to the capture position reproduces the
    cache's bf16 keys bit for bit (rounding error of the round trip stays far below half a bf16
    ulp); values are kept in the cache dtype as captured.
    """

    keys_pre_rope: torch.Tensor  # [layers, n_tokens, kv_heads, head_dim] float32
    values: torch.Tensor  # [layers, n_tokens, kv_heads, head_dim] cache dtype
    checksum: str

    @classmethod
    def build(cls, keys_pre_rope: torch.Tensor, values: torch.Tensor) -> FactKV:
        if keys_pre_rope.shape != values.shape or keys_pre_rope.dim() != 4:
            raise ValueError(
                f"keys {tuple(keys_pre_rope.shape)} and values {tuple(values.shape)} must both "
                "be [layers, n_tokens, kv_heads, head_dim]"
            )
        keys = keys_pre_rope.to(torch.float32).contiguous()
        vals = values.contiguous()
        return cls(keys, vals, checksum_of(keys, vals))

    @property
    def n_tokens(self) -> int:
        return int(self.keys_pre_rope.shape[1])

    @property
    def nbytes(self) -> int:
        return int(
            self.keys_pre_rope.numel() * self.keys_pre_rope.element_size()
            + self.values.numel() * self.values.element_size()
        )

    def verify(self) -> bool:
        return checksum_of(self.keys_pre_rope, self.values) == self.checksum


def checksum_of(keys: torch.Tensor, values: torch.Tensor) -> str:
    digest = hashlib.sha256()
    for tensor in (keys, values):
        digest.update(str(tensor.dtype).encode())
        digest.update(repr(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
