"""The residency index's records: tiers, an entry's residency, and the moves and placements
the index reports for the worker to apply. Torch-free, shared by the index, the tensor pool,
the connector and the benchmarks."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpu_runtime.errors import TenantMismatchError
from gpu_runtime.types import FactKey, TenantId


class Tier(enum.StrEnum):
    """Where an entry's fastest copy lives, fastest first."""

    GPU = "gpu"
    HOST = "host"
    DISK = "disk"


MEMORY_TIERS = (Tier.GPU, Tier.HOST)
RANK = {tier: rank for rank, tier in enumerate(Tier)}  # fastest first


class UnknownEntryError(KeyError):
    """A pin or unpin named keys the index does not hold (or that are not pinned)."""


@dataclass(frozen=True)
class Move:
    """Copy ``key``'s KV from ``src_slabs`` of ``src_tier`` to ``dst_slabs`` of ``dst_tier``.

    DISK has no slabs: a move to DISK frees the source slabs, one from DISK reads the durable copy.
    """

    key: FactKey
    src_tier: Tier
    dst_tier: Tier
    src_slabs: tuple[int, ...]
    dst_slabs: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    """Where a newly admitted entry goes, after applying ``moves`` (in order) to make room."""

    tier: Tier
    slabs: tuple[int, ...]
    moves: tuple[Move, ...] = ()


@dataclass
class Entry:
    """One fact's residency; the index hands out copies, never its own (mutable) records."""

    key: FactKey
    nbytes: int
    tier: Tier
    slabs: tuple[int, ...] = ()
    pins: int = 0
    last_use: int = 0
    doomed: bool = False  # removed while pinned: freed on the last unpin
    # Which arrival on a memory tier this is (``LruHeap``'s bookkeeping; 0: on disk only).
    placement: int = field(default=0, compare=False, repr=False)


def check_tenant(tenant: TenantId, key: FactKey) -> None:
    if key.tenant.value != tenant.value:
        raise TenantMismatchError(f"key of tenant {key.tenant.value!r} used as {tenant.value!r}")


def distinct_keys(tenant: TenantId, keys: Iterable[FactKey]) -> list[FactKey]:
    """Checks every key before anything changes, and drops repeats (a request pins a key once)."""
    result = list(dict.fromkeys(keys))
    name = tenant.value
    for key in result:
        if key.tenant.value != name:  # check_tenant, inlined: this runs per fact of every request
            check_tenant(tenant, key)
    return result
