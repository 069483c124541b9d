"""The store interfaces: what the connector's worker half holds (``KVStore``: memory or the
tiered pool), the durable store behind it (``DurableKVStore``: the packed segment store), and
the torch-free question other processes ask of the durable store (``StoredFactsView``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from gpu_runtime.types import FactKey, TenantId

if TYPE_CHECKING:
    from gpu_runtime.store.fact_kv import FactKV


class KVStore(Protocol):
    def put(self, tenant: TenantId, key: FactKey, kv: FactKV) -> None: ...

    def put_many(self, tenant: TenantId, items: Sequence[tuple[FactKey, FactKV]]) -> None:
        """Several facts at once (an engine step's finished captures): one durable commit."""
        ...

    def get(self, tenant: TenantId, key: FactKey) -> FactKV | None: ...

    def contains_all(self, tenant: TenantId, keys: Iterable[FactKey]) -> bool: ...

    def delete(self, tenant: TenantId, key: FactKey) -> bool: ...

    def delete_many(self, tenant: TenantId, keys: Sequence[FactKey]) -> int:
        """Deletes facts from every tier; how many were held. Nothing of them is readable
        anywhere once it returns."""
        ...

    def delete_tenant(self, tenant: TenantId) -> None: ...

    def keys(self, tenant: TenantId) -> list[FactKey]: ...

    def prefetch(self, tenant: TenantId, keys: list[FactKey]) -> None:
        """A hint that a request will read ``keys`` soon (tiered pool: start promoting)."""
        ...

    def reclaim(self) -> None:
        """Housekeeping the engine loop runs while idle, off any request's critical path
        (tiered pool: release the pins of reads that have completed)."""
        ...


class DurableKVStore(Protocol):
    """Fact KV on disk, outliving the process: the source of truth for "is this stored"."""

    def put(self, key: FactKey, kv: FactKV) -> int:
        """Stores durably; the bytes it takes on disk."""
        ...

    def put_many(self, items: Iterable[tuple[FactKey, FactKV]]) -> list[int]: ...

    def get(self, key: FactKey) -> FactKV | None:
        """The fact's KV, checked; ``None`` if absent or damaged (damage is discarded)."""
        ...

    def exists(self, key: FactKey) -> bool: ...

    def size(self, key: FactKey) -> int | None: ...

    def delete(self, key: FactKey) -> bool: ...

    def delete_many(self, tenant: TenantId, keys: Iterable[FactKey]) -> int: ...

    def delete_tenant(self, tenant: TenantId) -> None: ...

    def keys(self, tenant: TenantId) -> list[FactKey]: ...

    def usage(self, tenant: TenantId | None = None) -> dict[str, int]:
        """``disk_facts``, ``disk_bytes`` and the files' ``disk_segment_bytes``."""
        ...


class StoredFactsView(Protocol):
    """Whether facts are in the durable store, asked from any process (torch-free)."""

    def contains(self, key: FactKey) -> bool: ...

    def contains_all(
        self,
        tenant: TenantId,
        keys: Iterable[FactKey],
        encode: Callable[[FactKey], bytes] = ...,
    ) -> bool: ...

    def size(self, key: FactKey) -> int | None: ...
