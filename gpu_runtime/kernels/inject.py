"""One fused kernel for injection: gather from pool slabs, re-rotate keys, scatter into the cache.

The slow path (``connector/worker.py``) gathers each fact with PyTorch, concatenates, rotates
in several float32 passes and scatters layer by layer: dozens of launches and full-size
temporaries per request. Here one program handles one (token, layer): it reads the token's K
and V rows straight out of the pool's slab arenas (GPU memory, or pinned host memory read over
PCIe through unified addressing, so host-tier facts need no staging copy), rotates K by the
position change with the model's own float32 cos/sin table, and writes both rows into vLLM's
FlashAttention cache at the token's slot. Launch it once for all layers, or layer by layer so a
host-tier load overlaps the forward (``connector/fused.py``).

The arithmetic is ``RopeRotator.move``'s: rotate by ``|delta|`` with ``sin`` negated when the
target precedes the source; ``delta == 0`` is exactly the identity (cos 1, sin 0), so facts
injected where they were captured are bit-exact. On CPU tensors the same kernel runs under
Triton's interpreter, which is how CI checks it against the PyTorch path.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

try:  # Triton ships with CUDA PyTorch (and with xgrammar on CPU); without it the slow path runs
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - exercised only on installs without Triton
    triton = None

TOKEN_FIELDS = 4  # per loaded token: fact index, token index within the fact, delta, slot
FACT_FIELDS = 3  # per fact: tier (arena index), stored tokens, first row in the slab table


def available() -> bool:
    return triton is not None


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class KernelShape:
    """Static facts about the model and the cache the kernel is specialised for."""

    kv_heads: int
    head_size: int
    rotary_dim: int
    neox: bool
    dtype: torch.dtype
    n_layers: int
    block_size: int
    strides: tuple[int, int, int]  # cache element strides of (block, head, token)
    slab_bytes: int

    @property
    def row_bytes(self) -> int:  # one token's K (or V) for one layer in a stored blob
        return self.kv_heads * self.head_size * torch.tensor([], dtype=self.dtype).element_size()


if triton is not None:

    def _inject(  # type: ignore[no-untyped-def]
        tokens_ptr,  # int64 [T, 4]: fact, local token, delta = target - source position, slot
        facts_ptr,  # int64 [F, 3]: tier, stored tokens, first slab-table row
        slab_table_ptr,  # int64 [S]: slab ids of every fact, fact after fact
        arenas_ptr,  # int64 [tiers]: base address of each tier's slab arena
        layers_ptr,  # int64 [L]: base address of each layer's cache tensor
        cos_sin_ptr,  # float32 [max_position, ROT]: cos then sin
        layer_start,
        n_layers,
        stride_block,
        stride_head,
        stride_token,
        block_size,
        slab_bytes,
        H: tl.constexpr,
        HP: tl.constexpr,  # H rounded up to a power of two (tl.arange needs one)
        D: tl.constexpr,
        DP: tl.constexpr,
        ROT: tl.constexpr,
        HALFP: tl.constexpr,
        PASS: tl.constexpr,  # D - ROT dims that are not rotated
        PASSP: tl.constexpr,
        NEOX: tl.constexpr,
        ES: tl.constexpr,  # element size in bytes
        DT: tl.constexpr,
    ):
        token = tl.program_id(0).to(tl.int64)
        layer = layer_start + tl.program_id(1).to(tl.int64)
        fact = tl.load(tokens_ptr + token * 4)
        local = tl.load(tokens_ptr + token * 4 + 1)
        delta = tl.load(tokens_ptr + token * 4 + 2)
        slot = tl.load(tokens_ptr + token * 4 + 3)
        tier = tl.load(facts_ptr + fact * 3)
        stored = tl.load(facts_ptr + fact * 3 + 1)
        first_slab = tl.load(facts_ptr + fact * 3 + 2)
        arena = tl.load(arenas_ptr + tier)

        # Blob layout: keys [L, n, H, D], then values [L, n, H, D]; a row never straddles slabs.
        row_bytes = H * D * ES
        off_k = (layer * stored + local) * row_bytes
        off_v = ((n_layers + layer) * stored + local) * row_bytes
        slab_k = tl.load(slab_table_ptr + first_slab + off_k // slab_bytes)
        slab_v = tl.load(slab_table_ptr + first_slab + off_v // slab_bytes)
        src_k = (arena + slab_k * slab_bytes + off_k % slab_bytes).to(tl.pointer_type(DT))
        src_v = (arena + slab_v * slab_bytes + off_v % slab_bytes).to(tl.pointer_type(DT))
        base = tl.load(layers_ptr + layer).to(tl.pointer_type(DT))
        dst = base + (slot // block_size) * stride_block + (slot % block_size) * stride_token

        heads = tl.arange(0, HP)[:, None]  # [HP, 1]
        head_ok = heads < H
        cols = tl.arange(0, DP)[None, :]  # [1, DP]
        row_ok = head_ok & (cols < D)
        value = tl.load(src_v + heads * D + cols, mask=row_ok)
        tl.store(dst + heads * stride_head + D + cols, value, mask=row_ok)

        half = tl.arange(0, HALFP)[None, :]  # [1, HALFP]
        half_ok = half < ROT // 2
        angle = tl.abs(delta)
        cos = tl.load(cos_sin_ptr + angle * ROT + half, mask=half_ok, other=1.0)
        sin = tl.load(cos_sin_ptr + angle * ROT + ROT // 2 + half, mask=half_ok, other=0.0)
        sin = tl.where(delta >= 0, sin, -sin)  # R(-p) = R(p) with sin negated
        if NEOX:  # pairs (i, i + ROT/2)
            first = half
            second = half + ROT // 2
        else:  # GPT-J style: interleaved pairs (2i, 2i + 1)
            first = 2 * half
            second = 2 * half + 1
        pair_ok = head_ok & half_ok
        x1 = tl.load(src_k + heads * D + first, mask=pair_ok).to(tl.float32)
        x2 = tl.load(src_k + heads * D + second, mask=pair_ok).to(tl.float32)
        out1 = x1 * cos - x2 * sin
        out2 = x2 * cos + x1 * sin
        tl.store(dst + heads * stride_head + first, out1.to(DT), mask=pair_ok)
        tl.store(dst + heads * stride_head + second, out2.to(DT), mask=pair_ok)
        if PASS > 0:  # partial rotary: the remaining dims are copied as they are
            rest = ROT + tl.arange(0, PASSP)[None, :]
            rest_ok = head_ok & (rest < D)
            kept = tl.load(src_k + heads * D + rest, mask=rest_ok)
            tl.store(dst + heads * stride_head + rest, kept, mask=rest_ok)

    # Scalars are not specialised (Triton would compile a variant per value class: layer 0,
    # layer 1, multiples of 16...): one compiled kernel per model shape, warmed up at start.
    _COMPILED = triton.jit(
        _inject,
        do_not_specialize=[
            "layer_start", "n_layers", "stride_block", "stride_head", "stride_token",
            "block_size", "slab_bytes",
        ],
    )  # fmt: skip
    _INTERPRETED = InterpretedFunction(_inject)
    _TL_DTYPES: dict[torch.dtype, Any] = {
        torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32,
    }  # fmt: skip


def supported_dtype(dtype: torch.dtype) -> bool:
    return triton is not None and dtype in _TL_DTYPES


_LAUNCHERS: dict[KernelShape, Any] = {}  # shape -> kernel compiled for aligned pointers


def launch(
    shape: KernelShape,
    tokens: torch.Tensor,  # int64 [T, 4] on the cache's device
    facts: torch.Tensor,  # int64 [F, 3]
    slab_table: torch.Tensor,  # int64 [S]
    arenas: torch.Tensor,  # int64 [tiers]
    layers: torch.Tensor,  # int64 [L]
    cos_sin: torch.Tensor,  # float32 [max_position, rotary_dim]
    layer_start: int,
    layer_count: int,
) -> None:
    """Injects ``tokens`` into layers ``[layer_start, layer_start + layer_count)``."""
    n_tokens = int(tokens.shape[0])
    if n_tokens == 0 or layer_count == 0:
        return
    grid = (n_tokens, layer_count, 1)
    tensors = (tokens, facts, slab_table, arenas, layers, cos_sin)
    scalars = (layer_start, shape.n_layers, *shape.strides, shape.block_size, shape.slab_bytes)
    constants = _constants(shape)
    if tokens.device.type == "cpu":
        _INTERPRETED[grid](*tensors, *scalars, **constants)
        return
    compiled = _LAUNCHERS.get(shape)
    aligned = all(t.data_ptr() % 16 == 0 for t in tensors)
    if compiled is not None and aligned:
        # Straight to the compiled kernel: Triton's JIT entry re-binds and re-specialises
        # ~25 arguments on every call (tens of µs; per layer for host-tier loads).
        compiled[grid](*tensors, *scalars, *constants.values())
        return
    compiled = _COMPILED[grid](*tensors, *scalars, **constants)
    if aligned and compiled is not None:
        # Its only specialisation is the 16-byte alignment of the pointers (scalars are not
        # specialised), which is checked before every direct launch.
        _LAUNCHERS[shape] = compiled


@functools.cache
def _constants(shape: KernelShape) -> dict[str, Any]:
    """The kernel's compile-time constants for a shape, worked out once (launches are per step)."""
    rest = shape.head_size - shape.rotary_dim
    return dict(
        H=shape.kv_heads, HP=_next_pow2(shape.kv_heads),
        D=shape.head_size, DP=_next_pow2(shape.head_size),
        ROT=shape.rotary_dim, HALFP=_next_pow2(shape.rotary_dim // 2),
        PASS=rest, PASSP=_next_pow2(max(rest, 1)), NEOX=shape.neox,
        ES=torch.tensor([], dtype=shape.dtype).element_size(), DT=_TL_DTYPES[shape.dtype],
    )  # fmt: skip
