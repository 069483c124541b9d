"""FactKV: one fact's KV for every layer, with the positions its keys were rotated at.

Keys are kept exactly as captured (cache dtype, rotated at ``positions``) rather than un-rotated:
``R(-p) k`` is the fact's pre-RoPE key, recovered on demand in float32 by
``RopeRotator.unrotate``, so this is a lossless encoding of the pre-RoPE form. It also makes
re-injection at the capture positions bit-exact (no rotation at all) and halves key storage
compared with float32 pre-RoPE keys; injection anywhere else rotates by ``R(target) R(-p)``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FactKV:
    keys: torch.Tensor  # [layers, n_tokens, kv_heads, head_dim] cache dtype, rotated at positions
    values: torch.Tensor  # [layers, n_tokens, kv_heads, head_dim] cache dtype
    positions: torch.Tensor  # [n_tokens] int64: where each key was rotated to when captured
    checksum: str

    @classmethod
    def build(cls, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor) -> FactKV:
        if keys.shape != values.shape or keys.dim() != 4:
            raise ValueError(
                f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must both "
                "be [layers, n_tokens, kv_heads, head_dim]"
            )
        if positions.shape != (keys.shape[1],):
            raise ValueError(f"positions must be [{keys.shape[1]}], got {tuple(positions.shape)}")
        k, v = keys.contiguous(), values.contiguous()
        p = positions.to(torch.int64).contiguous()
        return cls(k, v, p, checksum_of(k, v, p))

    @property
    def n_tokens(self) -> int:
        return int(self.keys.shape[1])

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.keys, self.values, self.positions))

    def verify(self) -> bool:
        return checksum_of(self.keys, self.values, self.positions) == self.checksum


def checksum_of(*tensors: torch.Tensor) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(str(tensor.dtype).encode())
        digest.update(repr(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
