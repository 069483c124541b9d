"""Keyword retrieval beside the dense index: BM25 over a user's fact texts, fused by rank.

Dense MiniLM search misses facts that share the question's rare words (names, places, dates) but
not its phrasing. BM25 (``bm25s``, English stop words) finds those; the two rankings are fused by
reciprocal rank with the keyword side weighted (``INFERSCALE_RETRIEVAL_KEYWORD_WEIGHT``). Chosen
by measurement, not by hand: on LoCoMo, evidence recall@20 0.652 dense, 0.579 BM25, 0.667 fused
with weight 0.5 (docs/accuracy.md, "Retrieval"; ``python -m evals recall``).

A user's keyword index is built from their live facts and cached per (user, revision) with
the facts themselves (what a chat needs of each: its id, name, version and text), bounded in
bytes like the dense indexes: a change of the user's memories bumps the revision, so a stale
index is never searched, and at one revision a user's facts do not change, so a chat takes
its hits' texts from here instead of a query per request. The chat path, Mem0's search and
the evaluation harness all rank through ``fuse``.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

import numpy as np

from backend.retrieval.keys import IndexKey
from gpu_runtime.types import TenantId


def _import_without_jax(name: str) -> ModuleType:
    """Import ``name`` with ``import jax`` failing. bm25s imports JAX when it is installed and
    runs a top-k at import time, which makes JAX take 75% of a GPU's memory in every API process
    on a GPU host whose Python has JAX (the H200 image does: vLLM's own server then could not
    start beside the platform). We use only BM25 scores, never bm25s's JAX top-k, and the API
    loads no GPU framework. A process that already imported JAX keeps it."""
    if "jax" in sys.modules:
        return importlib.import_module(name)
    sys.modules["jax"] = None  # type: ignore[assignment]  # makes `import jax` an ImportError
    try:
        return importlib.import_module(name)
    finally:
        del sys.modules["jax"]


if TYPE_CHECKING:
    import bm25s
else:
    bm25s = _import_without_jax("bm25s")

RRF_K = 60  # reciprocal-rank fusion's constant (Cormack et al.): 1 / (60 + rank)
_STOPWORDS = "en"
# A rough upper bound of one cached index per character of its texts (tokens, the sparse
# score matrix, the vocabulary); only for the cache's budget.
_BYTES_PER_CHAR = 24
_PER_INDEX_OVERHEAD = 4096
# One cached document beyond its text (the object, its id, name and version).
_PER_DOCUMENT_OVERHEAD = 256


class Document(Protocol):
    """What the cache indexes: a fact's row id and its text (a chat's ``FactBrief``)."""

    @property
    def id(self) -> int: ...

    @property
    def text(self) -> str: ...


D = TypeVar("D", bound=Document)


class KeywordIndex:
    """BM25 over one set of texts; ``ranking`` gives positions into them."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.size = len(texts)
        self.nbytes = _PER_INDEX_OVERHEAD + _BYTES_PER_CHAR * sum(len(t) for t in texts)
        self._bm25: bm25s.BM25 | None = None
        tokens = bm25s.tokenize(list(texts), stopwords=_STOPWORDS, show_progress=False)
        if self.size and tokens.vocab:  # texts of stop words only have nothing to match
            self._bm25 = bm25s.BM25()
            self._bm25.index(tokens, show_progress=False)

    def ranking(self, query: str) -> list[int]:
        """Positions of the texts sharing a word with ``query``, best BM25 score first."""
        if self._bm25 is None:
            return []
        words = bm25s.tokenize(
            [query], stopwords=_STOPWORDS, show_progress=False, return_ids=False
        )[0]
        if not words:
            return []
        scores = np.asarray(self._bm25.get_scores(words))  # [size]
        order = np.argsort(-scores, kind="stable")
        return [int(i) for i in order if scores[i] > 0]


def fuse(dense: Sequence[int], keyword: Sequence[int], weight: float) -> list[int]:
    """Reciprocal-rank fusion of two rankings of the same items, best first (the keyword side
    weighted; ties keep the dense order). Items only the dense ranking has keep their place."""
    if weight <= 0 or not keyword:
        return list(dense)
    score: dict[int, float] = {}
    for rank, item in enumerate(dense):
        score[item] = 1.0 / (RRF_K + rank + 1)
    for rank, item in enumerate(keyword):
        score[item] = score.get(item, 0.0) + weight / (RRF_K + rank + 1)
    place = {item: n for n, item in enumerate(dense)}
    return sorted(score, key=lambda item: (-score[item], place.get(item, len(place))))


@dataclass(frozen=True)
class _Cached:
    """One user's documents at a revision, by row id too, and their keyword index."""

    revision: int
    documents: Sequence[Document]
    index: KeywordIndex
    by_id: Mapping[int, Document] = field(init=False)
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_id", {d.id: d for d in self.documents})
        size = self.index.nbytes + _PER_DOCUMENT_OVERHEAD * len(self.documents)
        object.__setattr__(self, "nbytes", size)


class KeywordCache:
    """Per-user keyword indexes and their documents at a revision, least recently used dropped
    over ``max_bytes``."""

    def __init__(self, max_bytes: int, weight: float) -> None:
        self.max_bytes = max_bytes
        self.weight = weight  # the keyword ranking's weight in ``fuse`` (0: not used)
        self.held_bytes = 0
        self._lock = threading.Lock()
        self._entries: OrderedDict[IndexKey, _Cached] = OrderedDict()

    def get(
        self, key: IndexKey, revision: int, load: Callable[[], Sequence[D]]
    ) -> tuple[Sequence[D], Mapping[int, D], KeywordIndex]:
        """(documents, the same by row id, their index) of the user at ``revision``, the
        index's positions into the documents; ``load`` gives the live facts when the cached
        ones are missing or of another revision (one loader per cache: the documents come back
        as it gave them)."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None and found.revision == revision:
                self._entries.move_to_end(key)
                return self._typed(found)
        documents = load()
        # Built outside the lock: searches of others go on.
        cached = _Cached(revision, documents, KeywordIndex([d.text for d in documents]))
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.held_bytes -= old.nbytes
            self._entries[key] = cached
            self.held_bytes += cached.nbytes
            while self.held_bytes > self.max_bytes and len(self._entries) > 1:
                _, dropped = self._entries.popitem(last=False)
                self.held_bytes -= dropped.nbytes
        return self._typed(cached)

    @staticmethod
    def _typed(cached: _Cached) -> tuple[Sequence[D], Mapping[int, D], KeywordIndex]:
        """The entry as its loader's type (one loader per cache, so that is what it holds)."""
        by_id = cast(Mapping[int, D], cached.by_id)
        return cast(Sequence[D], cached.documents), by_id, cached.index

    def drop_tenant(self, tenant: TenantId) -> None:
        with self._lock:
            for key in [k for k in self._entries if k.tenant == tenant]:
                self.held_bytes -= self._entries.pop(key).nbytes

    def drop_user(self, key: IndexKey) -> None:
        with self._lock:
            found = self._entries.pop(key, None)
            if found is not None:
                self.held_bytes -= found.nbytes
