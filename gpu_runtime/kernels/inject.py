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
injected where they were captured are bit-exact. FP8 facts (``store/quant.py``) are dequantized
in float32 on the way (e4m3 times the row's scale) and written into a 16/32-bit cache; into an
e4m3 cache (per-layer scales) a row at the layer's scale that stays in place is copied as its
bytes, any other is rotated in float32 and quantized at the layer's scale (``FactCodec``'s
arithmetic, ``connector/codec.py``). On CPU tensors the same kernel runs under Triton's
interpreter, which is how CI checks it against the PyTorch path.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import Any

import torch

from gpu_runtime.kernels import FACT_FIELDS as FACT_FIELDS  # the tables' layout, shared
from gpu_runtime.kernels import TOKEN_FIELDS as TOKEN_FIELDS  # with connector/plan.py

try:  # Triton ships with CUDA PyTorch (and with xgrammar on CPU); without it the slow path runs
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - exercised only on installs without Triton
    triton = None


def available() -> bool:
    return triton is not None


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class KernelShape:
    """Static facts about the model, the cache and the stored facts the kernel is specialised
    for."""

    kv_heads: int
    head_size: int
    rotary_dim: int
    neox: bool
    dtype: torch.dtype  # the cache's element type (an FP8 cache: float8_e4m3fn, kept as bytes)
    n_layers: int
    block_size: int
    strides: tuple[int, int, int]  # cache element strides of (block, head, token)
    slab_bytes: int
    fact_dtype: torch.dtype | None = None  # how facts are stored (None: as the cache)
    scaled: bool = False  # FP8 facts: float32 scales per token and head follow the values

    @property
    def stored_dtype(self) -> torch.dtype:
        return self.fact_dtype or self.dtype

    @property
    def row_bytes(self) -> int:  # one token's K (or V) for one layer in a stored blob
        size = torch.tensor([], dtype=self.stored_dtype).element_size()
        return self.kv_heads * self.head_size * size

    @property
    def scale_row_bytes(self) -> int:  # one token's K (or V) scales for one layer
        return 4 * self.kv_heads if self.scaled else 0


if triton is not None:

    def _e4m3_bits_fn(x):  # type: ignore[no-untyped-def]
        """float32 -> e4m3 bytes, saturating at 448, rounding to nearest even: the result of
        ``x.clamp(-448, 448).to(torch.float8_e4m3fn)``, in integer and power-of-two
        arithmetic only (exact on GPUs and in the interpreter, whose own cast rounds a carry
        into the next binade wrongly)."""
        bits = x.to(tl.int32, bitcast=True)
        sign = (bits >> 24) & 0x80
        e = tl.maximum(((bits >> 23) & 0xFF) - 127, -6)  # below 2**-6 the step is 2**-9
        up = ((130 - e) << 23).to(tl.float32, bitcast=True)  # 2**(3 - e)
        down = ((124 + e) << 23).to(tl.float32, bitcast=True)  # 2**(e - 3): the step
        steps = tl.abs(x) * up
        steps = (steps + 12582912.0) - 12582912.0  # round to an integer, ties to even
        r = tl.minimum(steps * down, 448.0)  # on e4m3's grid now: encode it exactly
        rb = r.to(tl.int32, bitcast=True)
        exponent = ((rb >> 23) & 0xFF) - 127
        normal = ((exponent + 7) << 3) | ((rb >> 20) & 7)
        byte = tl.where(exponent >= -6, normal, (r * 512.0).to(tl.int32))
        return (byte | sign).to(tl.uint8)

    def _narrow_fn(x, DT: tl.constexpr, BF16: tl.constexpr):  # type: ignore[no-untyped-def]
        """float32 -> the cache's type, rounding to nearest even. bf16 by hand: GPUs round so,
        but the interpreter truncates, and the PyTorch path it is checked against rounds."""
        if BF16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = bits + 0x7FFF + ((bits >> 16) & 1)
            out = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        else:
            out = x.to(DT)
        return out

    def _inject(  # type: ignore[no-untyped-def]
        tokens_ptr,  # int64 [T, 4]: fact, local token, delta = target - source position, slot
        facts_ptr,  # int64 [F, 3]: tier, stored tokens, first slab-table row
        slab_table_ptr,  # int64 [S]: slab ids of every fact, fact after fact
        arenas_ptr,  # int64 [tiers]: base address of each tier's slab arena
        layers_ptr,  # int64 [L]: base address of each layer's cache tensor
        cos_sin_ptr,  # float32 [max_position, ROT]: cos then sin
        cache_scales_ptr,  # float32 [2, L]: an FP8 cache's K then V scale per layer
        blocks_ptr,  # int64 [B] (RUN): the load's blocks, from block ``first_block`` on
        layer_start,
        n_layers,
        shift,  # RUN: added to every token's delta
        load_start,  # RUN: token t goes to prompt position load_start + t
        first_block,  # RUN: the block of load_start
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
        ES: tl.constexpr,  # element size of the stored facts, in bytes
        DT: tl.constexpr,  # the cache's element type (uint8 for an FP8 cache: its bytes)
        BF16: tl.constexpr,  # DT is bfloat16
        SDT: tl.constexpr,  # the stored facts' element type
        SRC: tl.constexpr,  # what stored rows are read as: SDT, or their bytes when SCALED
        SCALED: tl.constexpr,  # stored facts are FP8 with float32 scales per token and head
        CFP8: tl.constexpr,  # the cache is e4m3 at a scale per layer
        RUN: tl.constexpr,  # tokens are a run's template rows: shift them, place them here
    ):
        token = tl.program_id(0).to(tl.int64)
        layer = layer_start + tl.program_id(1).to(tl.int64)
        fact = tl.load(tokens_ptr + token * 4)
        local = tl.load(tokens_ptr + token * 4 + 1)
        delta = tl.load(tokens_ptr + token * 4 + 2)
        if RUN:  # (``connector/plan.py``'s ``RunTables``): no per-token table from the host
            delta = delta + shift
            position = load_start + token
            block = tl.load(blocks_ptr + position // block_size - first_block)
            slot = block * block_size + position % block_size
        else:
            slot = tl.load(tokens_ptr + token * 4 + 3)
        tier = tl.load(facts_ptr + fact * 3)
        stored = tl.load(facts_ptr + fact * 3 + 1)
        first_slab = tl.load(facts_ptr + fact * 3 + 2)
        arena = tl.load(arenas_ptr + tier)

        # Blob layout: keys [L, n, H, D], values [L, n, H, D], then (SCALED) key scales
        # [L, n, H] and value scales [L, n, H] float32; a row never straddles slabs.
        row_bytes = H * D * ES
        off_k = (layer * stored + local) * row_bytes
        off_v = ((n_layers + layer) * stored + local) * row_bytes
        slab_k = tl.load(slab_table_ptr + first_slab + off_k // slab_bytes)
        slab_v = tl.load(slab_table_ptr + first_slab + off_v // slab_bytes)
        # SCALED: rows are read as bytes and decoded below (``SDT`` bitcast, times the scale)
        src_k = (arena + slab_k * slab_bytes + off_k % slab_bytes).to(tl.pointer_type(SRC))
        src_v = (arena + slab_v * slab_bytes + off_v % slab_bytes).to(tl.pointer_type(SRC))
        base = tl.load(layers_ptr + layer).to(tl.pointer_type(DT))
        dst = base + (slot // block_size) * stride_block + (slot % block_size) * stride_token

        heads = tl.arange(0, HP)[:, None]  # [HP, 1]
        head_ok = heads < H
        cols = tl.arange(0, DP)[None, :]  # [1, DP]
        row_ok = head_ok & (cols < D)
        k_scale = 1.0
        v_scale = 1.0
        if SCALED:
            scales_at = 2 * n_layers * stored * row_bytes
            off_ks = scales_at + (layer * stored + local) * H * 4
            off_vs = scales_at + ((n_layers + layer) * stored + local) * H * 4
            slab_ks = tl.load(slab_table_ptr + first_slab + off_ks // slab_bytes)
            slab_vs = tl.load(slab_table_ptr + first_slab + off_vs // slab_bytes)
            ks_ptr = (arena + slab_ks * slab_bytes + off_ks % slab_bytes).to(
                tl.pointer_type(tl.float32)
            )
            vs_ptr = (arena + slab_vs * slab_bytes + off_vs % slab_bytes).to(
                tl.pointer_type(tl.float32)
            )
            k_scale = tl.load(ks_ptr + heads, mask=head_ok, other=1.0)  # [HP, 1]
            v_scale = tl.load(vs_ptr + heads, mask=head_ok, other=1.0)
        cache_k = 1.0
        cache_v = 1.0
        if CFP8:  # rows at the layer's own scale are copied as they are
            cache_k = tl.load(cache_scales_ptr + layer)
            cache_v = tl.load(cache_scales_ptr + n_layers + layer)

        value = tl.load(src_v + heads * D + cols, mask=row_ok)
        if CFP8:
            wide = value.to(SDT, bitcast=True).to(tl.float32) * v_scale
            fresh = _e4m3_bits(tl.math.div_rn(wide, cache_v))
            value = tl.where(v_scale == cache_v, value, fresh)
        elif SCALED:
            value = _narrow(value.to(SDT, bitcast=True).to(tl.float32) * v_scale, DT, BF16)
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
        raw1 = tl.load(src_k + heads * D + first, mask=pair_ok)
        raw2 = tl.load(src_k + heads * D + second, mask=pair_ok)
        if SCALED:
            x1 = raw1.to(SDT, bitcast=True).to(tl.float32) * k_scale
            x2 = raw2.to(SDT, bitcast=True).to(tl.float32) * k_scale
        else:
            x1 = raw1.to(tl.float32)
            x2 = raw2.to(tl.float32)
        out1 = x1 * cos - x2 * sin
        out2 = x2 * cos + x1 * sin
        if CFP8:  # in place and at the layer's scale: the captured bytes themselves
            keep = (k_scale == cache_k) & (delta == 0)
            out1 = tl.where(keep, raw1, _e4m3_bits(tl.math.div_rn(out1, cache_k)))
            out2 = tl.where(keep, raw2, _e4m3_bits(tl.math.div_rn(out2, cache_k)))
        else:
            out1 = _narrow(out1, DT, BF16)
            out2 = _narrow(out2, DT, BF16)
        tl.store(dst + heads * stride_head + first, out1, mask=pair_ok)
        tl.store(dst + heads * stride_head + second, out2, mask=pair_ok)
        if PASS > 0:  # partial rotary: the remaining dims are not rotated
            rest = ROT + tl.arange(0, PASSP)[None, :]
            rest_ok = head_ok & (rest < D)
            kept = tl.load(src_k + heads * D + rest, mask=rest_ok)
            if CFP8:
                wide = kept.to(SDT, bitcast=True).to(tl.float32) * k_scale
                fresh = _e4m3_bits(tl.math.div_rn(wide, cache_k))
                kept = tl.where(k_scale == cache_k, kept, fresh)
            elif SCALED:
                kept = _narrow(kept.to(SDT, bitcast=True).to(tl.float32) * k_scale, DT, BF16)
            tl.store(dst + heads * stride_head + rest, kept, mask=rest_ok)

    # Scalars are not specialised (Triton would compile a variant per value class: layer 0,
    # layer 1, multiples of 16...): one compiled kernel per model shape, warmed up at start.
    _e4m3_bits = triton.jit(_e4m3_bits_fn)
    _narrow = triton.jit(_narrow_fn)
    _COMPILED = triton.jit(
        _inject,
        do_not_specialize=[
            "layer_start", "n_layers", "shift", "load_start", "first_block", "stride_block",
            "stride_head", "stride_token", "block_size", "slab_bytes",
        ],
    )  # fmt: skip
    # The interpreter runs the kernel's Python body: its helpers must be interpreted too (a
    # compiled one refuses calls from outside a compiled kernel), so the interpreted kernel is
    # the same code over globals in which they are.
    _HELPERS = {"_e4m3_bits": _e4m3_bits_fn, "_narrow": _narrow_fn}
    _INTERPRETED = InterpretedFunction(
        types.FunctionType(
            _inject.__code__,
            {**globals(), **{k: InterpretedFunction(f) for k, f in _HELPERS.items()}},
            _inject.__name__,
        )
    )
    _TL_DTYPES: dict[torch.dtype, Any] = {
        torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32,
        torch.float8_e4m3fn: tl.float8e4nv,
    }  # fmt: skip


def supported(shape: KernelShape) -> bool:
    """Whether the kernel serves this cache and fact format: 16/32-bit caches with facts as
    captured or as e4m3 with scales; e4m3 caches with e4m3 facts (scaled)."""
    if triton is None:
        return False
    cache, stored = shape.dtype, shape.stored_dtype
    if cache == torch.float8_e4m3fn:
        return stored == cache and shape.scaled
    if cache not in _TL_DTYPES or stored not in _TL_DTYPES:
        return False
    if shape.scaled:
        return stored == torch.float8_e4m3fn
    return stored == cache


@dataclass(frozen=True)
class RunPlacement:
    """Run mode (``connector/plan.py``'s ``RunTables``): ``tokens`` are a template's rows; the
    kernel adds ``shift`` to each delta and writes token ``t`` at prompt position ``start + t``,
    whose slot it reads off ``blocks`` (the block ids from ``first_block`` on)."""

    blocks: torch.Tensor  # int64 [B] on the cache's device
    shift: int
    start: int
    first_block: int


_LAUNCHERS: dict[tuple[KernelShape, bool], Any] = {}  # kernels compiled for aligned pointers


def launch(
    shape: KernelShape,
    tokens: torch.Tensor,  # int64 [T, 4] on the cache's device
    facts: torch.Tensor,  # int64 [F, 3]
    slab_table: torch.Tensor,  # int64 [S]
    arenas: torch.Tensor,  # int64 [tiers]
    layers: torch.Tensor,  # int64 [L]
    cos_sin: torch.Tensor,  # float32 [max_position, rotary_dim]
    cache_scales: torch.Tensor,  # float32 [2, L]: an FP8 cache's K and V scale per layer
    layer_start: int,
    layer_count: int,
    run: RunPlacement | None = None,
) -> None:
    """Injects ``tokens`` into layers ``[layer_start, layer_start + layer_count)``."""
    n_tokens = int(tokens.shape[0])
    if n_tokens == 0 or layer_count == 0:
        return
    grid = (n_tokens, layer_count, 1)
    blocks = run.blocks if run is not None else tokens  # (read in run mode only)
    tensors = (tokens, facts, slab_table, arenas, layers, cos_sin, cache_scales, blocks)
    placed = (run.shift, run.start, run.first_block) if run is not None else (0, 0, 0)
    scalars = (layer_start, shape.n_layers, *placed, *shape.strides, shape.block_size,
               shape.slab_bytes)  # fmt: skip
    constants = _constants(shape, run is not None)
    if tokens.device.type == "cpu":
        _INTERPRETED[grid](*tensors, *scalars, **constants)
        return
    variant = (shape, run is not None)
    compiled = _LAUNCHERS.get(variant)
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
        _LAUNCHERS[variant] = compiled


@functools.cache
def _constants(shape: KernelShape, run: bool) -> dict[str, Any]:
    """The kernel's compile-time constants for a shape, worked out once (launches are per step)."""
    rest = shape.head_size - shape.rotary_dim
    cache_fp8 = shape.dtype == torch.float8_e4m3fn
    return dict(
        H=shape.kv_heads, HP=_next_pow2(shape.kv_heads),
        D=shape.head_size, DP=_next_pow2(shape.head_size),
        ROT=shape.rotary_dim, HALFP=_next_pow2(shape.rotary_dim // 2),
        PASS=rest, PASSP=_next_pow2(max(rest, 1)), NEOX=shape.neox,
        ES=torch.tensor([], dtype=shape.stored_dtype).element_size(),
        DT=tl.uint8 if cache_fp8 else _TL_DTYPES[shape.dtype],
        BF16=shape.dtype == torch.bfloat16,
        SDT=_TL_DTYPES[shape.stored_dtype],
        SRC=tl.uint8 if shape.scaled else _TL_DTYPES[shape.stored_dtype],
        SCALED=shape.scaled, CFP8=cache_fp8, RUN=run,
    )  # fmt: skip
