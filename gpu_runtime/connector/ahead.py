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
        self._held: OrderedDict[tuple[TenantId, frozenset[FactKey]], _Held] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def hint(self, tenant: TenantId, keys: Sequence[FactKey]) -> bool:
        """Pins ``keys`` (distinct, all of ``tenant``) for a load to come; ``False`` when
        nothing was held (the bound is reached, a fact is not in memory, or the same facts are
        held already)."""
        self.sweep()
        wanted = list(dict.fromkeys(keys))
        if not wanted or any(key.tenant != tenant for key in wanted):
            return False
        slot = (tenant, frozenset(wanted))
        with self._lock:
            if len(self._held) >= self._capacity or slot in self._held:
                return False
        found = self._acquire(tenant, wanted)
        if found is None and len(wanted) > 1 and wanted[0].is_preamble:
            # A preamble not encoded yet (its request will encode it): hold the facts alone,
            # which the load takes as "all but the first".
            wanted = wanted[1:]
            slot = (tenant, frozenset(wanted))
            found = self._acquire(tenant, wanted)
        if found is None:
            return False
        held = _Held(tenant, wanted, found, token_template(found), self._clock() + self._hold_s)
        with self._lock:
            if slot not in self._held and len(self._held) < self._capacity:
                self._held[slot] = held
                return True
        self._release(tenant, wanted)  # another hint for the same facts won the race
        return False

    def take(self, tenant: TenantId, keys: Sequence[FactKey]) -> Taken | None:
        """A held hint whose facts are all among a load's ``keys`` (distinct, in the load's
        order): all of them, or all but the first (the preamble, which no hint names). Its pins
        pass to the caller."""
        if not self._held:
            return None
        with self._lock:
            held = self._held.pop((tenant, frozenset(keys)), None)
            if held is None and len(keys) > 1:  # a hint without the preamble
                held = self._held.pop((tenant, frozenset(keys[1:])), None)
        return None if held is None else Taken(held.keys, held.found, held.template)

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
        for held in dropped:
            self._release(held.tenant, held.keys)
