"""PinnedAhead: facts a prefetch hint pinned before their request's load asks for them.

The API sends a request's prefetch hint as soon as retrieval has the fact ids, a few ms before
the request reaches the engine (docs/benchmarks.md). The worker's load then pins the same facts
and gathers where their bytes are (``TieredKVPool.acquire``): per fact Python, on the engine
core's critical path, ~0.4 ms for k=50 on the H100 hosts' engine cores (run 15's profile). Done
in the hint listener's thread instead, ahead of the request, the load finds it done. The API's
hint names the preamble too; a hint without it (or one sent before the preamble was first
encoded) leaves the load to pin the preamble alone and join the two pinnings. The thread also
plans the facts' tokens as one run (``plan.token_template``), which a load that reads them as
such a run (the usual kv request) only completes.

Held pins keep facts from being evicted, so they are bounded: at most ``capacity`` hints are
held, each for at most ``hold_s``; a hint over the bound is only a prefetch. A purge drops the
tenant's held hints first. Torch-free: the pool's ``acquire`` and ``release`` are passed in.

A hint races its request: the request's load may look for it while the hint's thread is still
pinning (the worker starts the facts' promotion first, then pins). Such a hint is *pending*
from the moment it is accepted; a load that finds its facts pending marks it missed and pins
on its own, and the hint releases what it pinned as soon as it has. Before, it stayed held
with nobody to take it, its facts neither evictable nor demotable for ``hold_s``, and such
orphans took places in the bound that later hints need. (A hint that arrives after its load
has looked is still held until it expires: a load cannot tell it from the next request's.)
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpu_runtime.connector.plan import TokenTemplate, token_template
from gpu_runtime.pool.arena import PinnedFacts
from gpu_runtime.types import FactKey, TenantId

Acquire = Callable[[TenantId, list[FactKey]], PinnedFacts | None]
Release = Callable[[TenantId, list[FactKey]], None]

DEFAULT_HOLD_S = 1.0  # a hint leads its request by ms; a queued request may wait longer
DEFAULT_CAPACITY = 32  # hints held at once (each pins up to a request's facts)


_Slot = tuple[TenantId, frozenset[FactKey]]


@dataclass(frozen=True)
class _Held:
    tenant: TenantId
    keys: list[FactKey]
    found: PinnedFacts
    template: TokenTemplate
    expires: float


@dataclass(frozen=True)
class Taken:
    """What a load found pinned ahead: ``keys`` (pinned; the load releases them), where
    their bytes are and their tokens planned as one run."""

    keys: list[FactKey]
    found: PinnedFacts
    template: TokenTemplate


class PinnedAhead:
    def __init__(
        self,
        acquire: Acquire,
        release: Release,
        hold_s: float = DEFAULT_HOLD_S,
        capacity: int = DEFAULT_CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._acquire = acquire
        self._release = release
        self._hold_s = hold_s
        self._capacity = capacity
        self._clock = clock
        self._lock = threading.Lock()
        # (tenant, the keys as a set) -> held; oldest first
        self._held: OrderedDict[_Slot, _Held] = OrderedDict()
        # hints still pinning -> whether a load (or a purge) has missed them meanwhile
        self._pending: dict[_Slot, bool] = {}

    def __len__(self) -> int:
        return len(self._held)

    def hint(self, tenant: TenantId, keys: Sequence[FactKey]) -> bool:
        """Pins ``keys`` (distinct, all of ``tenant``) for a load to come; ``False`` when
        nothing was held (the bound is reached, a fact is not in memory, the same facts are
        held or being pinned already, or their load came first)."""
        self.sweep()
        wanted = list(dict.fromkeys(keys))
        if not wanted or any(key.tenant != tenant for key in wanted):
            return False
        slot: _Slot = (tenant, frozenset(wanted))
        with self._lock:
            if (
                len(self._held) + len(self._pending) >= self._capacity
                or slot in self._held
                or slot in self._pending
            ):
                return False
            self._pending[slot] = False
        found: PinnedFacts | None = None
        try:
            found = self._acquire(tenant, wanted)
            if found is None and len(wanted) > 1 and wanted[0].is_preamble:
                # A preamble not encoded yet (its request will encode it): hold the facts
                # alone, which the load takes as "all but the first".
                wanted = wanted[1:]
                found = self._acquire(tenant, wanted)
            template = token_template(found) if found is not None else None
        except BaseException:  # the slot is never left pending, nothing left pinned
            with self._lock:
                self._pending.pop(slot, None)
            if found is not None:
                self._release(tenant, wanted)
            raise
        held_slot: _Slot = (tenant, frozenset(wanted))
        with self._lock:
            missed = self._pending.pop(slot)
            keep = (
                found is not None
                and template is not None
                and not missed
                and held_slot not in self._held
                and len(self._held) < self._capacity
            )
            if keep:
                assert found is not None and template is not None
                expires = self._clock() + self._hold_s
                self._held[held_slot] = _Held(tenant, wanted, found, template, expires)
        if keep:
            return True
        if found is not None:  # its load came first, or another hint for the same facts won
            self._release(tenant, wanted)
        return False

    def take(self, tenant: TenantId, keys: Sequence[FactKey]) -> Taken | None:
        """A held hint whose facts are all among a load's ``keys`` (distinct, in the load's
        order): all of them, or all but the first (the preamble, which no hint names). Its pins
        pass to the caller."""
        if not self._held and not self._pending:
            return None
        whole: _Slot = (tenant, frozenset(keys))
        slots = [whole, (tenant, frozenset(keys[1:]))] if len(keys) > 1 else [whole]
        with self._lock:
            for slot in slots:  # the whole load, then a hint without the preamble
                held = self._held.pop(slot, None)
                if held is not None:
                    return Taken(held.keys, held.found, held.template)
            for slot in slots:  # still pinning: this load pins on its own, the hint lets go
                if slot in self._pending:
                    self._pending[slot] = True
        return None

    def sweep(self) -> None:
        """Releases the hints held past their time (oldest first, so it stops early)."""
        if not self._held:
            return
        now = self._clock()
        expired: list[_Held] = []
        with self._lock:
            while self._held:
                slot, held = next(iter(self._held.items()))
                if held.expires > now:
                    break
                del self._held[slot]
                expired.append(held)
        for held in expired:
            self._release(held.tenant, held.keys)

    def drop(self, tenant: TenantId | None = None) -> None:
        """Releases every held hint of ``tenant`` (all tenants: ``None``), before a purge."""
        with self._lock:
            gone = [slot for slot in self._held if tenant is None or slot[0] == tenant]
            dropped = [self._held.pop(slot) for slot in gone]
            for slot in self._pending:  # pinning now: let go as soon as it has pinned
                if tenant is None or slot[0] == tenant:
                    self._pending[slot] = True
        for held in dropped:
            self._release(held.tenant, held.keys)
