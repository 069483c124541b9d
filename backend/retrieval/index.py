"""Per-(tenant, end-user) FAISS indexes over fact embeddings.

One exact inner-product index per end-user, rather than one shared index filtered after the
search, makes isolation structural: a search only ever touches the asking user's vectors, so no
score, `top_k` or filtering bug can leak another tenant's or user's fact. Per-user fact counts are
small (hundreds to a few thousand), so exact search is cheap and needs no training.

The CPU index is always the source of truth. When FAISS has GPU support, searches run on a GPU
mirror that is re-uploaded after any change, because GPU flat indexes cannot remove ids.

Bounded: the indexes held stay under ``max_bytes`` (the least recently used users' go first); an
evicted user's index is rebuilt from Postgres on its next search (the services see its revision
gone), so a process's memory does not grow with every user it has ever served.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt

from backend.retrieval import checks
from backend.retrieval.keys import IndexKey
from backend.retrieval.keyword import KeywordCache
from gpu_runtime.types import TenantId

__all__ = ["FactIndex", "IndexKey", "gpu_available", "limit_search_threads"]

# FAISS's StandardGpuResources reserves a large scratch buffer by default; flat searches over one
# user's facts need little, and the GPU is shared with vLLM's KV cache.
_GPU_TEMP_MEMORY_BYTES = 64 * 1024 * 1024
# What one indexed fact costs beyond its vector (its id, the reverse map), and one index.
_PER_FACT_OVERHEAD = 64
_PER_INDEX_OVERHEAD = 1024


@dataclass
class _Entry:
    """One user's index, the DB revision it reflects, and its GPU mirror (None when stale)."""

    cpu: Any
    revision: int | None = None
    gpu: Any = None
    bytes: int = 0


def limit_search_threads(threads: int) -> int:
    """Cap the OpenMP threads FAISS's CPU searches use in this process (0 leaves FAISS's
    default); the number now in force. Process-wide: FAISS keeps one OpenMP runtime."""
    if threads < 0:
        raise ValueError(f"threads must be >= 0, got {threads!r}")
    if threads:
        faiss.omp_set_num_threads(threads)
    return int(faiss.omp_get_max_threads())


def gpu_available() -> bool:
    """Whether the installed FAISS build has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and int(faiss.get_num_gpus()) > 0


class FactIndex:
    """Thread-safe map from `IndexKey` to an exact cosine-similarity index of fact vectors.

    Fact ids are non-negative int64 (database primary keys); vectors are float32 of width `dim`
    and must already be L2-normalised, as `Embedder.embed` returns them.
    """

    def __init__(
        self,
        dim: int,
        *,
        use_gpu: bool | None = None,
        gpu_device: int = 0,
        max_bytes: int | None = None,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes!r}")
        self._dim = dim
        self._lock = threading.Lock()
        self._entries: OrderedDict[IndexKey, _Entry] = OrderedDict()  # least recent first
        self.max_bytes = max_bytes
        self.held_bytes = 0
        self.hits = self.misses = self.evictions = 0
        # Decided once: switching mid-life would leave some users' mirrors on the wrong device.
        if use_gpu is None:
            use_gpu = gpu_available()
        elif use_gpu and not gpu_available():
            raise RuntimeError("use_gpu=True but this FAISS build has no GPU support or no GPU")
        # Users' keyword indexes beside these (set by whoever fuses rankings): dropped with them.
        self.keywords: KeywordCache | None = None
        self._gpu_device = gpu_device
        self._gpu_res: Any = None
        if use_gpu:
            self._gpu_res = faiss.StandardGpuResources()
            self._gpu_res.setTempMemory(_GPU_TEMP_MEMORY_BYTES)

    @property
    def dim(self) -> int:
        """Width of every vector this index accepts."""
        return self._dim

    @property
    def on_gpu(self) -> bool:
        """Whether searches run on a GPU mirror."""
        return self._gpu_res is not None

    # -- writes ---------------------------------------------------------------------------------

    def upsert(self, key: IndexKey, fact_id: int, vector: npt.NDArray[np.float32]) -> None:
        """Add one fact's vector, replacing the vector already stored under that id, if any."""
        self.upsert_many(key, [fact_id], checks.query(vector, self._dim, name="vector"))

    def upsert_many(
        self, key: IndexKey, ids: Sequence[int], vectors: npt.NDArray[np.float32]
    ) -> None:
        """Add or replace several facts; row i of `vectors` belongs to `ids[i]`.

        Creating a key this way leaves its revision unset: the index holds some facts but was not
        built from a full snapshot, so `revision()` stays None until `rebuild`/`set_revision`.
        """
        id_array = checks.fact_ids(ids)
        matrix = checks.matrix(vectors, len(id_array), self._dim, name="vectors")
        if len(id_array) == 0:
            return
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._store(key, _Entry(cpu=self._new_cpu_index()))
            entry.cpu.remove_ids(id_array)
            entry.cpu.add_with_ids(matrix, id_array)
            entry.gpu = None
            self._resized(key, entry)

    def remove(self, key: IndexKey, fact_id: int) -> bool:
        """Remove one fact; False when the key or the fact was not indexed."""
        id_array = np.array([checks.fact_id(fact_id)], dtype=np.int64)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False
            removed = int(entry.cpu.remove_ids(id_array))
            if removed:
                entry.gpu = None
                self._resized(key, entry)
            return removed > 0

    def rebuild(
        self,
        key: IndexKey,
        ids: Sequence[int],
        vectors: npt.NDArray[np.float32],
        revision: int,
    ) -> None:
        """Replace the key's whole index with exactly these facts, as of `revision`.

        The new index is filled before the lock is taken, so searches keep answering from the old
        one until the swap.
        """
        checked_revision = checks.revision(revision)
        id_array = checks.fact_ids(ids)
        matrix = checks.matrix(vectors, len(id_array), self._dim, name="vectors")
        fresh = self._new_cpu_index()
        if len(id_array):
            fresh.add_with_ids(matrix, id_array)
        with self._lock:
            self._store(key, _Entry(cpu=fresh, revision=checked_revision))

    def set_revision(self, key: IndexKey, revision: int) -> None:
        """Record that the key's index reflects `revision` (creating an empty one if needed).

        For callers that keep the index current incrementally and only need to record how far.
        """
        checked_revision = checks.revision(revision)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._store(key, _Entry(cpu=self._new_cpu_index()))
            entry.revision = checked_revision

    def apply_if_current(
        self,
        key: IndexKey,
        expected: int,
        revision: int,
        upserts: Sequence[tuple[int, npt.NDArray[np.float32]]] = (),
        removals: Sequence[int] = (),
    ) -> bool:
        """One change, kept incrementally, only if the key's index reflects ``expected`` (else
        nothing is touched and the next search rebuilds it from Postgres): checked and applied
        under one lock, so an eviction in between never leaves a partial index marked current."""
        ids = checks.fact_ids([fact_id for fact_id, _ in upserts])
        rows = [checks.query(vector, self._dim, name="vector") for _, vector in upserts]
        matrix = np.vstack(rows) if rows else np.zeros((0, self._dim), dtype=np.float32)
        gone = checks.fact_ids(list(removals))
        checked = checks.revision(revision)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.revision != expected:
                return False
            if len(ids):
                entry.cpu.remove_ids(ids)
                entry.cpu.add_with_ids(matrix, ids)
            if len(gone):
                entry.cpu.remove_ids(gone)
            entry.gpu = None
            entry.revision = checked
            self._resized(key, entry)
            return True

    def drop_user(self, key: IndexKey) -> bool:
        """Forget one user's index and revision; False when there was none."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                self.held_bytes -= entry.bytes
        if self.keywords is not None:
            self.keywords.drop_user(key)
        return entry is not None

    def drop_tenant(self, tenant: TenantId) -> int:
        """Forget every index of one tenant; returns how many users' indexes were dropped."""
        with self._lock:
            doomed = [key for key in self._entries if key.tenant == tenant]
            for key in doomed:
                self.held_bytes -= self._entries.pop(key).bytes
        if self.keywords is not None:
            self.keywords.drop_tenant(tenant)
        return len(doomed)

    # -- reads ----------------------------------------------------------------------------------

    def revision(self, key: IndexKey) -> int | None:
        """The revision of the last rebuild/set_revision; None if the key never had one."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(key)
            return entry.revision

    def size(self, key: IndexKey) -> int:
        """How many facts the key's index holds (0 for an unknown key)."""
        with self._lock:
            entry = self._entries.get(key)
            return 0 if entry is None else int(entry.cpu.ntotal)

    def search(
        self, key: IndexKey, query_vector: npt.NDArray[np.float32], top_k: int
    ) -> list[tuple[int, float]]:
        """The key's `top_k` most similar facts as (fact id, cosine), best first.

        An unknown key or empty index gives []; `top_k` beyond the index size gives every fact.
        """
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0:
            raise ValueError(f"top_k must be a positive int, got {top_k!r}")
        query = checks.query(query_vector, self._dim, name="query_vector")
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry.cpu.ntotal == 0:
                return []
            k = min(top_k, int(entry.cpu.ntotal))
            self._entries.move_to_end(key)
            scores, labels = self._searchable(entry).search(query, k)
        return [
            (int(label), float(score))
            for label, score in zip(labels[0], scores[0], strict=True)
            if label >= 0
        ]

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"users": len(self._entries), "bytes": self.held_bytes, "hits": self.hits,
                    "misses": self.misses, "evictions": self.evictions}  # fmt: skip

    # -- internals ------------------------------------------------------------------------------

    def _cost(self, entry: _Entry) -> int:
        return int(entry.cpu.ntotal) * (self._dim * 4 + _PER_FACT_OVERHEAD) + _PER_INDEX_OVERHEAD

    def _store(self, key: IndexKey, entry: _Entry) -> _Entry:
        """Puts ``entry`` under ``key`` as the most recent (lock held), then evicts to fit."""
        old = self._entries.pop(key, None)
        if old is not None:
            self.held_bytes -= old.bytes
        self._entries[key] = entry
        entry.bytes = 0
        self._resized(key, entry)
        return entry

    def _resized(self, key: IndexKey, entry: _Entry) -> None:
        """Re-counts the entry's bytes and evicts least recent users' indexes (never this one)
        while over ``max_bytes`` (lock held)."""
        cost = self._cost(entry)
        self.held_bytes += cost - entry.bytes
        entry.bytes = cost
        self._entries.move_to_end(key)
        if self.max_bytes is None:
            return
        while self.held_bytes > self.max_bytes and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            if oldest == key:
                break
            self.held_bytes -= self._entries.pop(oldest).bytes
            self.evictions += 1

    def _new_cpu_index(self) -> Any:
        """An empty exact inner-product index that stores caller-chosen int64 ids."""
        return faiss.IndexIDMap2(faiss.IndexFlatIP(self._dim))

    def _searchable(self, entry: _Entry) -> Any:
        """The index to search: the CPU one, or a GPU mirror uploaded when stale (lock held)."""
        if self._gpu_res is None:
            return entry.cpu
        if entry.gpu is None:
            entry.gpu = faiss.index_cpu_to_gpu(self._gpu_res, self._gpu_device, entry.cpu)
        return entry.gpu
