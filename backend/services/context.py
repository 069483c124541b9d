"""What a service needs for one tenant: its session, tenant and the shared process resources."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from backend.db.session import after_commit, run_after_commit
from backend.jobs.pipeline.outbox import Send
from backend.retrieval.embedder import Embedder
from backend.retrieval.index import FactIndex
from backend.runtime.client import EngineClient
from backend.services.query_embedding import QueryEmbedder
from gpu_runtime.types import TenantId


@dataclass
class TenantContext:
    session: Session
    tenant: TenantId
    index: FactIndex
    load_embedder: Callable[[], Embedder]  # the process's, loaded when a fact is embedded
    queries: QueryEmbedder  # search queries' vectors (on the runtime's GPU where it serves them)
    engine: EngineClient
    enqueue: Send  # (task name, kwargs) to the broker, through backend.jobs.pipeline.outbox

    @property
    def embedder(self) -> Embedder:
        """Facts' vectors (and the fallback for queries). A chat whose query the runtime embeds
        never needs it, so building a context does not load it."""
        return self.load_embedder()


__all__ = ["TenantContext", "after_commit", "run_after_commit"]
