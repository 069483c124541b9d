"""Per-worker-process resources: the runtime's client, the embedder, the index."""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy.orm import Session

from backend.api.resources import EMBEDDING_DIM
from backend.core.config import get_settings
from backend.engine_client import EngineClient
from backend.retrieval.embedder import get_embedder
from backend.retrieval.index import FactIndex
from backend.services.context import TenantContext
from backend.services.outbox import send_to_broker
from gpu_runtime.types import TenantId


@lru_cache
def engine_client() -> EngineClient:
    return EngineClient(get_settings())


@lru_cache
def worker_index() -> FactIndex:
    return FactIndex(EMBEDDING_DIM)


def tenant_context(
    session: Session, tenant: TenantId, engine: EngineClient | None = None
) -> TenantContext:
    return TenantContext(
        session=session,
        tenant=tenant,
        index=worker_index(),
        embedder=get_embedder(),
        engine=engine or engine_client(),
        enqueue=send_to_broker,
    )
