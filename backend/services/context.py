"""What a service needs for one tenant: its session, tenant and the shared process resources."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from backend.db.session import after_commit, run_after_commit
from backend.jobs.pipeline.outbox import Send
from backend.retrieval.embedder import Embedder
from backend.retrieval.index import FactIndex
from backend.runtime.client import EngineClient
from gpu_runtime.types import TenantId


@dataclass
class TenantContext:
    session: Session
    tenant: TenantId
    index: FactIndex
    embedder: Embedder
    engine: EngineClient
    enqueue: Send  # (task name, kwargs) to the broker, through backend.jobs.pipeline.outbox


__all__ = ["TenantContext", "after_commit", "run_after_commit"]
