"""Whether a fact is in the durable store, for processes that never read KV. Torch-free.

The engine core's catalog (which facts the scheduler half may claim) and the runtime server
(``/v1/contains``, encode results, preambles) ask this; the worker processes write the store.
They share nothing but the files: each tenant's index log is followed here (``IndexFollower``:
one ``open`` and ``fstat`` per question when nothing changed, else only the appended records are
read). Followers of tenants not asked about lately are dropped once the entries held pass a
bound, so memory stays bounded however many tenants the volume holds.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path

from gpu_runtime.store.disk.extent_index import IndexFollower
from gpu_runtime.store.disk.paths import tenant_dir_name
from gpu_runtime.store.disk.records import Extent, key_bytes
from gpu_runtime.types import FactKey, TenantId

DEFAULT_MAX_ENTRIES = 1 << 20  # index entries held across tenants (~300 bytes each)


class StoredFacts:
    def __init__(self, root: Path | str, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.root = Path(root)
        self._max_entries = max_entries
        self._followers: OrderedDict[TenantId, IndexFollower] = OrderedDict()
        self._lock = threading.Lock()

    def locate(self, key: FactKey) -> Extent | None:
        """Where the fact's bytes are (``None``: not stored)."""
        with self._lock:
            return self._follower(key.tenant).refresh().get(key_bytes(key))

    def contains(self, key: FactKey) -> bool:
        return self.locate(key) is not None

    def contains_all(
        self,
        tenant: TenantId,
        keys: Iterable[FactKey],
        encode: Callable[[FactKey], bytes] = key_bytes,
    ) -> bool:
        """Every key (all of ``tenant``) is stored; the index is read once for all of them.
        ``encode``: ``key_bytes``, or a caller's memo of it (the JSON form costs microseconds)."""
        name = tenant.value  # compared as strings: this runs per fact of every claim
        with self._lock:
            stored = self._follower(tenant).refresh().get
            return all(k.tenant.value == name and stored(encode(k)) is not None for k in keys)

    def size(self, key: FactKey) -> int | None:
        """Bytes the fact takes on disk, or ``None`` when it is not stored."""
        extent = self.locate(key)
        return extent.length if extent is not None else None

    def _follower(self, tenant: TenantId) -> IndexFollower:
        follower = self._followers.get(tenant)
        if follower is None:
            follower = IndexFollower(self.root / tenant_dir_name(tenant))
            self._followers[tenant] = follower
            self._bound()
        self._followers.move_to_end(tenant)
        return follower

    def _bound(self) -> None:
        held = sum(len(f.index) for f in self._followers.values())
        while held > self._max_entries and len(self._followers) > 1:
            _, dropped = self._followers.popitem(last=False)
            held -= len(dropped.index)
