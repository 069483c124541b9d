"""What a service needs for one tenant: its session, tenant and the shared process resources."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from backend.db.session import after_commit, run_after_commit
from backend.engine_client import EngineClient
from backend.retrieval.embedder import Embedder
from backend.retrieval.index import FactIndex
from backend.services.outbox import Send
from gpu_runtime.types import TenantId


@dataclass
class TenantContext:
    session: Session
    tenant: TenantId
    index: FactIndex
    embedder: Embedder
    engine: EngineClient
    enqueue: Send  # (task name, kwargs) to the broker; services go through backend.services.outbox


__all__ = ["TenantContext", "after_commit", "run_after_commit"]
