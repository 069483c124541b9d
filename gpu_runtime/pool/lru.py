"""One memory tier's resident entries in least-recently-used order, for eviction planning.

The residency index used to sort a tier's whole population every time it needed room, so each
promotion into a full tier cost O(n log n) under the index's lock; a chat prefetching 50 host
facts into a full GPU tier of tens of thousands of facts sorted it 50 times. This keeps a
min-heap instead, with lazy updates so the serving path's uses stay O(1):

* a record ``(tick, placement, entry)`` is pushed when the entry arrives on the tier (``place``
  numbers the arrival); a use only
  raises ``entry.last_use``, so a record's tick is a lower bound of the entry's true last use;
* a record whose entry left the tier since (``entry.placement`` changed) is stale and dropped,
  and one whose entry was used since is re-pushed with the new tick, both when they reach the
  top; a valid record on top is therefore the tier's least recently used entry;
* stale records are compacted away once they outnumber the live ones.

Ticks are unique per use, so the order is the exact LRU order the sort gave.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Generator
from typing import Protocol


class Ranked(Protocol):
    """What the heap reads of an entry (``pool.entries.Entry``)."""

    last_use: int
    placement: int


_Record = tuple[int, int, Ranked]


_placements = itertools.count(1)  # process-wide: an entry never confuses two placements


def place(entry: Ranked) -> None:
    """Marks a new arrival of the entry on a tier: records of its earlier stays go stale. Call
    it once per arrival, before adding the entry to the heaps that order that tier."""
    entry.placement = next(_placements)


class LruHeap:
    """Entries on one tier (or one tenant's on it); ``walk`` yields them least recently used
    first. Several heaps may hold one entry: they share its placement."""

    def __init__(self) -> None:
        self._heap: list[_Record] = []
        self._live = 0

    def __len__(self) -> int:
        return self._live

    def add(self, entry: Ranked) -> None:
        """The entry has just been placed on this tier (``place`` first)."""
        heapq.heappush(self._heap, (entry.last_use, entry.placement, entry))
        self._live += 1

    def remove(self, entry: Ranked) -> None:
        """The entry has left this tier (its record goes stale)."""
        entry.placement = 0
        self._live -= 1
        if len(self._heap) > 2 * self._live + 64:
            self._heap = [r for r in self._heap if r[2].placement == r[1]]
            for i, (_, placement, live) in enumerate(self._heap):
                self._heap[i] = (live.last_use, placement, live)
            heapq.heapify(self._heap)

    def walk(self) -> Generator[Ranked, None, None]:
        """The tier's entries, least recently used first, produced lazily.

        Records are taken off the heap as they are yielded and put back when the walk ends
        (close it, or run it out), so a plan that evicts nothing leaves the heap as it was;
        a victim's record goes stale when the index moves it off the tier.
        """
        heap, taken = self._heap, []
        try:
            while heap:
                tick, placement, entry = heap[0]
                if entry.placement != placement:
                    heapq.heappop(heap)  # left the tier since
                elif entry.last_use != tick:
                    heapq.heapreplace(heap, (entry.last_use, placement, entry))  # used since
                else:
                    taken.append(heapq.heappop(heap))
                    yield entry
        finally:
            for record in taken:
                heapq.heappush(heap, record)
