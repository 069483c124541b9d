"""Per-worker-process resources: engine client (started on first encode), embedder, index."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy.orm import Session

from backend.api.resources import EMBEDDING_DIM
from backend.engine_client import EngineClient, InProcessEngineClient
from backend.retrieval.embedder import get_embedder
from backend.retrieval.index import FactIndex
from backend.services.context import TenantContext
from gpu_runtime.config import RuntimeSettings
from gpu_runtime.types import TenantId


@lru_cache
def engine_client() -> EngineClient:
    return InProcessEngineClient(RuntimeSettings())


@lru_cache
def worker_index() -> FactIndex:
    return FactIndex(EMBEDDING_DIM)


def enqueue(task: str, kwargs: dict[str, Any]) -> None:
    from worker.celery_app import celery_app, queue_for

    celery_app.send_task(task, kwargs=kwargs, queue=queue_for(task))


def tenant_context(
    session: Session, tenant: TenantId, engine: EngineClient | None = None
) -> TenantContext:
    return TenantContext(
        session=session,
        tenant=tenant,
        index=worker_index(),
        embedder=get_embedder(),
        engine=engine or engine_client(),
        enqueue=enqueue,
    )
