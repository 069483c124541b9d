"""Landings: promotions to the GPU tier whose copies may still be in flight, per fact.

A prefetch hint promotes a request's facts host -> GPU asynchronously, recording one event per
fact; a reader must wait for the copies of the facts it reads. Every copy is enqueued on the
pool's one side stream, so the events complete in the order they were recorded: a reader of
fifty facts needs one query and at most one wait (on the latest of its facts' events), not fifty
of each on the engine core's critical path. When that latest event has landed, so has every
copy recorded before it. Torch-free: an event is anything with ``query()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar

from gpu_runtime.types import FactKey


class Event(Protocol):
    def query(self) -> bool: ...  # True once the work recorded before it has completed


E = TypeVar("E", bound=Event)


class Landings(Generic[E]):
    """Not thread-safe: the pool calls it under its lock."""

    def __init__(self) -> None:
        # key -> (record order, event); kept in record order, oldest first
        self._in_flight: dict[FactKey, tuple[int, E]] = {}
        self._recorded = 0

    def __bool__(self) -> bool:
        return bool(self._in_flight)

    def __len__(self) -> int:
        return len(self._in_flight)

    def record(self, key: FactKey, event: E) -> None:
        """``event`` was recorded on the side stream after ``key``'s copy was enqueued."""
        self._recorded += 1
        self._in_flight.pop(key, None)  # re-inserted last: the dict stays in record order
        self._in_flight[key] = (self._recorded, event)

    def pop(self, key: FactKey) -> E | None:
        entry = self._in_flight.pop(key, None)
        return None if entry is None else entry[1]

    def wait_for(self, keys: Iterable[FactKey]) -> E | None:
        """The one event a reader of ``keys`` must wait on, or ``None`` when none of their
        copies is still in flight (then they are forgotten)."""
        get = self._in_flight.get
        found = [(key, entry) for key in keys if (entry := get(key)) is not None]
        if not found:
            return None
        _, (_, latest) = max(found, key=lambda item: item[1][0])
        if not latest.query():
            return latest
        for key, _ in found:  # landed, and every copy recorded before it too
            del self._in_flight[key]
        return None

    def sweep(self) -> None:
        """Forgets the copies that have landed: oldest first, stopping at the first in flight
        (those after it cannot have landed before it)."""
        landed = []
        for key, (_, event) in self._in_flight.items():
            if not event.query():
                break
            landed.append(key)
        for key in landed:
            del self._in_flight[key]
