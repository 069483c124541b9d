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

from backend.retrieval.keys import IndexKey
from backend.retrieval.keyword import KeywordCache
from gpu_runtime.types import TenantId

__all__ = ["FactIndex", "IndexKey", "gpu_available", "limit_search_threads"]

_INT64_MAX = int(np.iinfo(np.int64).max)
# Vectors must be unit length for inner product to be cosine; this absorbs float32 rounding only.
_NORM_TOLERANCE = 1e-3
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
        self.upsert_many(key, [fact_id], self._as_query(vector, name="vector"))

    def upsert_many(
        self, key: IndexKey, ids: Sequence[int], vectors: npt.NDArray[np.float32]
    ) -> None:
        """Add or replace several facts; row i of `vectors` belongs to `ids[i]`.

        Creating a key this way leaves its revision unset: the index holds some facts but was not
        built from a full snapshot, so `revision()` stays None until `rebuild`/`set_revision`.
        """
        id_array = self._check_ids(ids)
        matrix = self._check_matrix(vectors, len(id_array), name="vectors")
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
        id_array = np.array([self._check_id(fact_id)], dtype=np.int64)
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
        checked_revision = self._check_revision(revision)
        id_array = self._check_ids(ids)
        matrix = self._check_matrix(vectors, len(id_array), name="vectors")
        fresh = self._new_cpu_index()
        if len(id_array):
            fresh.add_with_ids(matrix, id_array)
        with self._lock:
            self._store(key, _Entry(cpu=fresh, revision=checked_revision))

    def set_revision(self, key: IndexKey, revision: int) -> None:
        """Record that the key's index reflects `revision` (creating an empty one if needed).

        For callers that keep the index current incrementally and only need to record how far.
        """
        checked_revision = self._check_revision(revision)
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
        ids = self._check_ids([fact_id for fact_id, _ in upserts])
        rows = [self._as_query(vector, name="vector") for _, vector in upserts]
        matrix = np.vstack(rows) if rows else np.zeros((0, self._dim), dtype=np.float32)
        gone = self._check_ids(list(removals))
        checked = self._check_revision(revision)
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
        query = self._as_query(query_vector, name="query_vector")
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

    @staticmethod
    def _check_id(fact_id: int) -> int:
        if isinstance(fact_id, bool | np.bool_) or not isinstance(fact_id, int | np.integer):
            raise ValueError(f"fact id must be an int, got {type(fact_id).__name__}")
        value = int(fact_id)
        # FAISS reports "no result" as id -1, so negative ids could not be told apart from it.
        if not 0 <= value <= _INT64_MAX:
            raise ValueError(f"fact id must be in [0, 2**63 - 1], got {value}")
        return value

    @classmethod
    def _check_ids(cls, ids: Sequence[int]) -> npt.NDArray[np.int64]:
        if isinstance(ids, str | bytes):
            raise ValueError("ids must be a sequence of ints")
        values = [cls._check_id(fact_id) for fact_id in ids]
        if len(set(values)) != len(values):
            raise ValueError("ids contain duplicates")
        return np.array(values, dtype=np.int64)

    @staticmethod
    def _check_revision(revision: int) -> int:
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise ValueError(f"revision must be an int, got {type(revision).__name__}")
        return revision

    def _check_matrix(self, vectors: Any, rows: int, *, name: str) -> npt.NDArray[np.float32]:
        """A C-contiguous float32 [rows, dim] array of finite unit-length rows, or ValueError."""
        if not isinstance(vectors, np.ndarray):
            raise ValueError(f"{name} must be a numpy array, got {type(vectors).__name__}")
        if vectors.dtype != np.float32:
            raise ValueError(f"{name} must be float32, got {vectors.dtype}")
        if vectors.shape != (rows, self._dim):
            raise ValueError(f"{name} must have shape {(rows, self._dim)}, got {vectors.shape}")
        if rows == 0:
            return np.ascontiguousarray(vectors)
        if not np.isfinite(vectors).all():
            raise ValueError(f"{name} contains NaN or infinite values")
        norms = np.linalg.norm(vectors, axis=1)
        bad = np.flatnonzero(np.abs(norms - 1.0) > _NORM_TOLERANCE)
        if bad.size:
            raise ValueError(
                f"{name} row {int(bad[0])} has L2 norm {float(norms[bad[0]]):.4f}; "
                "vectors must be L2-normalised so that inner product is cosine"
            )
        return np.ascontiguousarray(vectors)

    def _as_query(self, vector: Any, *, name: str) -> npt.NDArray[np.float32]:
        """Accept one vector as [dim] or [1, dim]; return it as a checked [1, dim] array."""
        if isinstance(vector, np.ndarray) and vector.ndim == 1:
            vector = vector.reshape(1, -1)
        return self._check_matrix(vector, 1, name=name)
