"""Fixed-size slab allocator over one preallocated pool (GPU or pinned host memory).

Pools are allocated once at start-up and carved into equal slabs so that entries of any size can
come and go without fragmenting the pool: an entry of ``n`` bytes takes ``ceil(n / slab_bytes)``
slabs, which need not be contiguous (the worker copies a fact's KV slab by slab). The allocator
only hands out slab ids; it owns no memory and is not thread-safe on its own (the residency
index calls it under its lock).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable


class OutOfSlabsError(MemoryError):
    """Not enough free slabs for an allocation; the caller must evict first."""


class SlabAllocator:
    """Hands out slab ids ``0 .. capacity_slabs - 1``, lowest free ids first (deterministic).

    A trailing remainder of ``capacity_bytes`` smaller than one slab is never used.
    """

    def __init__(self, capacity_bytes: int, slab_bytes: int) -> None:
        if slab_bytes <= 0:
            raise ValueError("slab_bytes must be positive")
        if capacity_bytes < 0:
            raise ValueError("capacity_bytes must be non-negative")
        self.slab_bytes = slab_bytes
        self.capacity_slabs = capacity_bytes // slab_bytes
        self._free: list[int] = list(range(self.capacity_slabs))  # already a valid min-heap
        self._allocated: set[int] = set()

    def slabs_for(self, nbytes: int) -> int:
        """How many slabs an entry of ``nbytes`` bytes takes (ceiling division)."""
        if nbytes < 0:
            raise ValueError("nbytes must be non-negative")
        return -(-nbytes // self.slab_bytes)

    def allocate(self, nbytes: int) -> tuple[int, ...]:
        """Slab ids for an entry of ``nbytes`` bytes; raises ``OutOfSlabsError`` if too few."""
        count = self.slabs_for(nbytes)
        if count > len(self._free):
            raise OutOfSlabsError(f"need {count} slabs, {len(self._free)} free")
        slabs = tuple(heapq.heappop(self._free) for _ in range(count))
        self._allocated.update(slabs)
        return slabs

    def free(self, slabs: Iterable[int]) -> None:
        """Returns slabs to the pool; refuses (changing nothing) a double or foreign free."""
        batch = list(slabs)
        if len(set(batch)) != len(batch) or not self._allocated.issuperset(batch):
            raise ValueError(f"freeing slabs that are not allocated: {sorted(batch)}")
        self._allocated.difference_update(batch)
        for slab in batch:
            heapq.heappush(self._free, slab)

    @property
    def free_slabs(self) -> int:
        return len(self._free)

    @property
    def used_slabs(self) -> int:
        return len(self._allocated)

    @property
    def capacity_bytes(self) -> int:
        return self.capacity_slabs * self.slab_bytes

    @property
    def free_bytes(self) -> int:
        return self.free_slabs * self.slab_bytes

    @property
    def used_bytes(self) -> int:
        return self.used_slabs * self.slab_bytes
