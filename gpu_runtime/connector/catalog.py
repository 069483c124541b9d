"""FactCatalog: the scheduler half's index of the facts it may claim. Torch-free.

A fact may be claimed when a worker can load it, and a worker can load any fact the durable store
holds (memory tiers are caches in front of it). The catalog therefore knows a fact once a worker
reports storing it, or once it has found the fact in the durable store's index (a restart,
another replica's encoding on a shared volume: ``StoredFacts`` follows each tenant's index log
from this process); a worker's report of a purge or of a corrupt extent forgets it.

Between a purge on the workers and their next report the catalog may still claim a purged fact;
the worker then finds nothing, reports the blocks as failed loads and vLLM recomputes them from
the prompt text, so the result is the same as never claiming. The remembered set is bounded: a
forgotten fact costs one look at its tenant's index when it is next asked for.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from gpu_runtime.connector.metadata import WorkerReport
from gpu_runtime.errors import TenantMismatchError
from gpu_runtime.store.base import StoredFactsView
from gpu_runtime.types import FactKey, TenantId

DEFAULT_LIMIT = 1 << 20  # remembered facts (a few hundred bytes each)


class FactCatalog:
    def __init__(self, stored: StoredFactsView | None, limit: int = DEFAULT_LIMIT) -> None:
        self._stored = stored
        self._limit = limit
        self._known: OrderedDict[FactKey, None] = OrderedDict()

    def available(self, tenant: TenantId, keys: Iterable[FactKey]) -> bool:
        """Every key is stored (for ``tenant``; a key of another tenant is an error)."""
        wanted = list(keys)
        name = tenant.value
        for key in wanted:
            if key.tenant.value != name:
                raise TenantMismatchError(f"key of {key.tenant.value!r} asked for {name!r}")
        known = self._known
        unknown = [key for key in wanted if key not in known]
        if not unknown:
            return True
        if self._stored is None or not self._stored.contains_all(tenant, unknown):
            return False
        self._remember(unknown)
        return True

    def apply(self, report: WorkerReport) -> None:
        self._remember(report.stored)
        for key in report.dropped:
            self._known.pop(key, None)
        if report.dropped_tenants:
            gone = set(report.dropped_tenants)
            for key in [k for k in self._known if k.tenant in gone]:
                del self._known[key]

    def __len__(self) -> int:
        return len(self._known)

    def _remember(self, keys: Iterable[FactKey]) -> None:
        for key in keys:
            self._known[key] = None
        while len(self._known) > self._limit:
            self._known.popitem(last=False)
