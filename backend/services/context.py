"""What a service needs for one tenant: its session, tenant and the shared process resources."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from backend.db.session import after_commit, run_after_commit
from backend.engine_client import EngineClient
from backend.retrieval.embedder import Embedder
from backend.retrieval.index import FactIndex
from gpu_runtime.types import TenantId


@dataclass
class TenantContext:
    session: Session
    tenant: TenantId
    index: FactIndex
    embedder: Embedder
    engine: EngineClient
    enqueue: Callable[[str, dict[str, object]], None]  # (task name, kwargs), after commit


__all__ = ["TenantContext", "after_commit", "run_after_commit"]
