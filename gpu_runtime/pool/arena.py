"""Byte-level storage of the tiered pool: fixed-size slab arenas and how a fact is packed.

A fact's KV (keys, values, an FP8 fact's scales, positions) is one byte blob spread over slabs
that need not be contiguous; arenas copy slabs between tiers by direct DMA. ``PinnedFacts``
tells the fused loader where a request's pinned facts' slabs are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey


@dataclass(frozen=True)
class Packing:
    """How a FactKV's tensors sit in its byte blob: keys, then values, then an FP8 fact's
    float32 scales (keys', then values'), then positions (at the next multiple of 8 bytes)."""

    shape: tuple[int, ...]  # [layers, n, heads, head_dim]
    dtype: torch.dtype
    checksum: str
    positions: tuple[int, ...]  # where each key was rotated at capture (also in the blob)
    scaled: bool = False  # FP8: [layers, n, heads] float32 scales for keys and for values
    # The same positions as an array [n] int64, for the fused loader's vectorised plan.
    position_array: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "position_array", np.asarray(self.positions, dtype=np.int64))

    @property
    def kv_bytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count * torch.tensor([], dtype=self.dtype).element_size()

    @property
    def scale_bytes(self) -> int:
        """Bytes of the keys' (or the values') scales: one float32 per token, head and layer."""
        layers, n, heads = self.shape[:3]
        return 4 * layers * n * heads if self.scaled else 0

    @property
    def positions_offset(self) -> int:
        end = 2 * self.kv_bytes + 2 * self.scale_bytes
        return end + -end % 8

    @property
    def nbytes(self) -> int:
        return self.positions_offset + self.shape[1] * 8


def pack(kv: FactKV) -> tuple[torch.Tensor, Packing]:
    packing = Packing(
        tuple(kv.keys.shape), kv.keys.dtype, kv.checksum, tuple(kv.positions.tolist()), kv.scaled
    )
    if packing.kv_bytes % 2:  # scales are viewed as float32 at 2 * kv_bytes
        raise ValueError("an FP8 fact's KV must take an even number of bytes")
    device = kv.keys.device
    parts = [kv.keys, kv.values]
    if kv.key_scales is not None and kv.value_scales is not None:
        parts += [kv.key_scales.to(device), kv.value_scales.to(device)]
    raw = [t.contiguous().view(torch.uint8).flatten() for t in parts]
    pad = packing.positions_offset - 2 * packing.kv_bytes - 2 * packing.scale_bytes
    raw.append(torch.zeros(pad, dtype=torch.uint8, device=device))
    raw.append(kv.positions.to(device).contiguous().view(torch.uint8).flatten())
    return torch.cat(raw), packing


def unpack(blob: torch.Tensor, packing: Packing) -> FactKV:
    size, scales = packing.kv_bytes, packing.scale_bytes
    keys = blob[:size].view(packing.dtype).view(packing.shape)
    values = blob[size : 2 * size].view(packing.dtype).view(packing.shape)
    positions = blob[packing.positions_offset : packing.nbytes].view(torch.int64).cpu()
    if not packing.scaled:
        return FactKV(keys, values, positions, packing.checksum)
    rows = packing.shape[:3]
    at = 2 * size
    key_scales = blob[at : at + scales].view(torch.float32).view(rows)
    value_scales = blob[at + scales : at + 2 * scales].view(torch.float32).view(rows)
    return FactKV(keys, values, positions, packing.checksum, key_scales, value_scales)


class SlabArena:
    """``n_slabs`` rows of ``slab_bytes``, allocated on first use on the pool's device."""

    def __init__(self, n_slabs: int, slab_bytes: int, device: torch.device, pinned: bool) -> None:
        self.slab_bytes = slab_bytes
        self.data = torch.empty(
            (max(n_slabs, 1), slab_bytes), dtype=torch.uint8, device=device, pin_memory=pinned
        )  # [slabs, slab_bytes]

    def write(self, slabs: tuple[int, ...], blob: torch.Tensor) -> None:
        rows = torch.zeros(len(slabs) * self.slab_bytes, dtype=torch.uint8, device=blob.device)
        rows[: blob.numel()] = blob
        index = torch.tensor(slabs, dtype=torch.int64, device=self.data.device)
        # Async only into device memory: a CPU-side index_put must not read a D2H copy in flight.
        async_copy = self.data.device.type == "cuda"
        staged = rows.view(len(slabs), self.slab_bytes).to(
            self.data.device, non_blocking=async_copy
        )
        self.data[index] = staged

    def read(self, slabs: tuple[int, ...], nbytes: int) -> torch.Tensor:
        """A copy of the fact's ``nbytes`` (the caller's pin ends before it is used)."""
        first = slabs[0]
        if slabs == tuple(range(first, first + len(slabs))):  # the usual case: one run
            # One copy of the bytes themselves (8x faster than the gather of whole slabs below
            # for a ~0.9 MB fact on vLLM-CPU, where it was a third of a request's load).
            return self.data[first : first + len(slabs)].view(-1)[:nbytes].clone()
        index = torch.tensor(slabs, dtype=torch.int64, device=self.data.device)
        return self.data[index].flatten()[:nbytes]  # [nbytes] uint8

    def copy_slabs(self, source: SlabArena, src: tuple[int, ...], dst: tuple[int, ...]) -> None:
        """Between arenas by direct (pinned) DMA, one copy per run of consecutive slabs on both
        sides (the allocator hands out lowest ids first, so a fact is usually one run)."""
        start = 0
        for i in range(1, len(src) + 1):
            if i == len(src) or src[i] != src[i - 1] + 1 or dst[i] != dst[i - 1] + 1:
                s, d, n = src[start], dst[start], i - start
                self.data[d : d + n].copy_(source.data[s : s + n], non_blocking=True)
                start = i


@dataclass(frozen=True)
class PinnedFacts:
    """Where a request's pinned facts' bytes are, fact by fact in the order asked for (arrays,
    so that the fused loader plans a request without a Python loop per fact or token)."""

    keys: tuple[FactKey, ...]
    arenas: np.ndarray  # [F] int64: 0 GPU arena, 1 host arena (``TieredKVPool.ARENAS``)
    n_tokens: np.ndarray  # [F] int64: stored tokens per fact
    n_layers: frozenset[int]  # layer counts the facts were encoded with (one, if one model)
    formats: frozenset[tuple[torch.dtype, bool]]  # (stored dtype, scaled) of the facts
    slab_rows: np.ndarray  # [F] int64: where each fact's slab ids start in ``slabs``
    slabs: np.ndarray  # [sum of slabs per fact] int64: slab ids, fact after fact
    position_rows: np.ndarray  # [F] int64: where each fact's positions start in ``positions``
    positions: np.ndarray  # [sum n_tokens] int64: capture positions, fact after fact
    ready: tuple[torch.cuda.Event, ...] = ()  # promotion copies a reader must wait for

    @property
    def on_host(self) -> bool:
        return bool(self.arenas.any())

    @staticmethod
    def joined(parts: list[PinnedFacts]) -> PinnedFacts:
        """Several pinnings as one, fact after fact in ``parts`` order (a load whose facts were
        partly pinned ahead by its prefetch hint)."""
        if len(parts) == 1:
            return parts[0]
        slab_base = np.cumsum([0] + [len(p.slabs) for p in parts[:-1]])  # [parts]
        position_base = np.cumsum([0] + [len(p.positions) for p in parts[:-1]])  # [parts]
        return PinnedFacts(
            keys=tuple(key for p in parts for key in p.keys),
            arenas=np.concatenate([p.arenas for p in parts]),
            n_tokens=np.concatenate([p.n_tokens for p in parts]),
            n_layers=frozenset().union(*(p.n_layers for p in parts)),
            formats=frozenset().union(*(p.formats for p in parts)),
            slab_rows=np.concatenate(
                [p.slab_rows + b for p, b in zip(parts, slab_base, strict=True)]
            ),
            slabs=np.concatenate([p.slabs for p in parts]),
            position_rows=np.concatenate(
                [p.position_rows + b for p, b in zip(parts, position_base, strict=True)]
            ),
            positions=np.concatenate([p.positions for p in parts]),
            ready=tuple(event for p in parts for event in p.ready),
        )
