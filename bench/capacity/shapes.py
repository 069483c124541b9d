"""Model shapes and KV dtypes, and how many bytes (and slabs) one fact takes in the pool.

The byte count reproduces ``gpu_runtime.pool.arena.Packing.nbytes`` without importing torch, so
the capacity model can run where torch is absent; ``tests/bench/capacity`` checks it
against the real ``pack`` and the real allocator. The blob is: keys, values (each
``layers * n * kv_heads * head_dim`` elements), an FP8 fact's float32 scales for keys and for
values (one per layer, token and KV head), zero padding to the next multiple of 8 bytes, then
the ``n`` capture positions as int64.
"""

from __future__ import annotations

from dataclasses import dataclass

SLAB_BYTES = 1 << 18  # INFERSCALE_POOL_SLAB_BYTES' default (gpu_runtime/config.py)
POSITION_BYTES = 8  # positions are int64 in the blob
SCALE_BYTES = 4  # an FP8 fact's scales are float32


@dataclass(frozen=True)
class ModelShape:
    """The attention shape that decides a fact's KV size (not parameter count)."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int


@dataclass(frozen=True)
class KVDType:
    """How facts are stored: element bytes, and whether per-row float32 scales ride along."""

    name: str
    element_bytes: int
    scaled: bool


# Values from the models' config.json (num_hidden_layers, num_key_value_heads, head_dim).
SHAPES: tuple[ModelShape, ...] = (
    ModelShape("Llama-3.1-8B", 32, 8, 128),
    ModelShape("Mistral-7B-v0.3", 32, 8, 128),
    ModelShape("Qwen2.5-7B", 28, 4, 128),
    ModelShape("Qwen3-14B", 40, 8, 128),
    ModelShape("SmolLM2-135M", 30, 3, 64),
)
BF16 = KVDType("bf16", 2, scaled=False)
FP8_E4M3 = KVDType("fp8_e4m3", 1, scaled=True)
DTYPES: tuple[KVDType, ...] = (BF16, FP8_E4M3)


def shape_named(name: str) -> ModelShape:
    for shape in SHAPES:
        if shape.name.lower() == name.lower():
            return shape
    raise KeyError(name)


def fact_bytes(shape: ModelShape, dtype: KVDType, n_tokens: int) -> int:
    """``Packing.nbytes`` of a fact of ``n_tokens`` tokens: what the pool admits."""
    rows = shape.layers * n_tokens * shape.kv_heads  # one row of head_dim elements each
    kv = rows * shape.head_dim * dtype.element_bytes  # keys' bytes (values': the same)
    scales = SCALE_BYTES * rows if dtype.scaled else 0  # keys' scales (values': the same)
    end = 2 * kv + 2 * scales
    positions_offset = end + -end % 8
    return positions_offset + n_tokens * POSITION_BYTES


def slabs_for(nbytes: int, slab_bytes: int = SLAB_BYTES) -> int:
    """``SlabAllocator.slabs_for``: whole slabs, not necessarily contiguous."""
    return -(-nbytes // slab_bytes)


def slab_rounded_bytes(
    shape: ModelShape, dtype: KVDType, n_tokens: int, slab_bytes: int = SLAB_BYTES
) -> int:
    """What a fact really costs a memory tier: its blob rounded up to whole slabs."""
    return slabs_for(fact_bytes(shape, dtype, n_tokens), slab_bytes) * slab_bytes
