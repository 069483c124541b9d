"""Facts per tier: tier bytes over what one fact really costs there.

Memory tiers (GPU, pinned host) are slab arenas: a tier of ``B`` bytes has ``B // slab`` slabs
(the allocator never uses a remainder smaller than a slab) and a fact of ``n`` bytes takes
``ceil(n / slab)`` of them, so a tier holds ``floor(B / slab) // ceil(n / slab)`` facts of one
length. Disk (the packed store) keeps the blob unrounded in an extent whose header, key and
metadata cost a little more; that overhead is approximated here (``DISK_OVERHEAD``), not
measured.

Facts are not all one length: ``facts_per_tier_mixed`` averages slabs over a length
distribution, which matters when a mean-length fact sits just under a slab boundary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from bench.capacity.shapes import (
    DTYPES,
    SHAPES,
    SLAB_BYTES,
    KVDType,
    ModelShape,
    fact_bytes,
    slabs_for,
)

LOCOMO_MEAN_TOKENS = 19.3  # LoCoMo's mean fact length in tokens (tests/gpu_runtime/pool)
DISK_OVERHEAD = 64 + 256  # an extent's header + key JSON + metadata, ~ (records.py): approximate
ALIGN = 64  # extents start at multiples of 64 bytes (gpu_runtime/store/records.py)

GIB = 1 << 30
TB = 10**12
# H200 defaults (assumptions, stated in docs/capacity.md): 60 GiB of the 141 GiB for the pool's
# GPU tier (the rest: weights, vLLM's own KV cache, activations), 512 GiB pinned host, 4 TB NVMe.
H200_GPU_BYTES = 60 * GIB
H200_HOST_BYTES = 512 * GIB
H200_DISK_BYTES = 4 * TB


@dataclass(frozen=True)
class TierCapacity:
    model: str
    dtype: str
    tokens: float
    fact_bytes: int  # the packed blob of a fact of ``round(tokens)`` tokens
    slabs_per_fact: int
    gpu_facts: int
    host_facts: int
    disk_facts: int
    slab_waste: float  # share of a fact's slabs that hold no bytes

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def tier_facts(tier_bytes: int, slabs_per_fact: float, slab_bytes: int = SLAB_BYTES) -> int:
    """Facts of ``slabs_per_fact`` slabs (a mean, for a mixture) that fit in a memory tier."""
    return int((tier_bytes // slab_bytes) // slabs_per_fact)


def disk_bytes(nbytes: int) -> int:
    """One fact's approximate footprint in the packed store (blob + extent overhead, aligned)."""
    total = nbytes + DISK_OVERHEAD
    return total + -total % ALIGN


def capacity(
    shape: ModelShape,
    dtype: KVDType,
    tokens: float = LOCOMO_MEAN_TOKENS,
    gpu_bytes: int = H200_GPU_BYTES,
    host_bytes: int = H200_HOST_BYTES,
    disk_bytes_total: int = H200_DISK_BYTES,
    slab_bytes: int = SLAB_BYTES,
) -> TierCapacity:
    """Facts per tier for facts of (a rounded) ``tokens`` tokens each."""
    n = max(1, round(tokens))
    nbytes = fact_bytes(shape, dtype, n)
    slabs = slabs_for(nbytes, slab_bytes)
    return TierCapacity(
        model=shape.name,
        dtype=dtype.name,
        tokens=tokens,
        fact_bytes=nbytes,
        slabs_per_fact=slabs,
        gpu_facts=tier_facts(gpu_bytes, slabs, slab_bytes),
        host_facts=tier_facts(host_bytes, slabs, slab_bytes),
        disk_facts=disk_bytes_total // disk_bytes(nbytes),
        slab_waste=1 - nbytes / (slabs * slab_bytes),
    )


def mean_slabs(
    shape: ModelShape, dtype: KVDType, lengths: Mapping[int, float], slab_bytes: int = SLAB_BYTES
) -> float:
    """Mean slabs per fact over a length distribution ``{tokens: probability}``."""
    total = sum(lengths.values())
    return (
        sum(p * slabs_for(fact_bytes(shape, dtype, n), slab_bytes) for n, p in lengths.items())
        / total
    )


def poisson_lengths(mean: float = LOCOMO_MEAN_TOKENS, lo: int = 1) -> dict[int, float]:
    """A stand-in length distribution with LoCoMo's mean (Poisson, truncated at ``lo``); the real
    LoCoMo histogram is not in this repository, so this only shows how spread moves the figure."""
    out: dict[int, float] = {}
    for n in range(lo, int(mean * 4) + 1):
        out[n] = math.exp(n * math.log(mean) - mean - math.lgamma(n + 1))
    return out


def facts_per_tier_mixed(
    shape: ModelShape,
    dtype: KVDType,
    lengths: Mapping[int, float],
    tier_bytes: int,
    slab_bytes: int = SLAB_BYTES,
) -> int:
    """Facts a memory tier holds when fact lengths follow ``lengths`` (in expectation)."""
    return tier_facts(tier_bytes, mean_slabs(shape, dtype, lengths, slab_bytes), slab_bytes)


def table(
    gpu_bytes: int = H200_GPU_BYTES,
    host_bytes: int = H200_HOST_BYTES,
    disk_bytes_total: int = H200_DISK_BYTES,
    tokens: float = LOCOMO_MEAN_TOKENS,
) -> list[dict[str, Any]]:
    """Every shape x dtype, with the mean-length figure and a Poisson-spread GPU figure."""
    rows = []
    spread = poisson_lengths(tokens)
    for shape in SHAPES:
        for dtype in DTYPES:
            row = capacity(shape, dtype, tokens, gpu_bytes, host_bytes, disk_bytes_total)
            out = row.as_dict()
            out["gpu_facts_poisson_lengths"] = facts_per_tier_mixed(shape, dtype, spread, gpu_bytes)
            rows.append(out)
    return rows
