"""The composition root: the process-wide resources the API and the workers share, one of each
per process (the runtime's client, the retrieval index, the embedder, the broker's sender), and
the ``TenantContext`` a service gets for one tenant. The API builds its own in ``create_app``;
a worker process, a CLI or a test uses ``process_resources()``."""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field
from functools import lru_cache

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from backend.core.breaker import redis_breaker
from backend.core.config import Settings, get_settings
from backend.db.session import open_connections
from backend.jobs.pipeline.broker import send_to_broker
from backend.jobs.pipeline.outbox import Send
from backend.retrieval.embedder import get_embedder
from backend.retrieval.index import FactIndex, gpu_available, limit_search_threads
from backend.retrieval.keyword import KeywordCache
from backend.runtime.client import EngineClient
from backend.services.context import TenantContext
from backend.services.credentials import CredentialCache
from backend.services.query_embedding import QueryEmbedder
from backend.services.rate_limits import RateLimiter
from gpu_runtime.client.inflight import InFlight
from gpu_runtime.types import TenantId

EMBEDDING_DIM = 384  # MiniLM-L6

logger = logging.getLogger(__name__)


def index_device_error(settings: Settings) -> str | None:
    """Why this process cannot build its retrieval index as configured, if it cannot (checked
    at start-up: a process that cannot start says why)."""
    if settings.index_on_gpu and not gpu_available():
        return "INFERSCALE_INDEX_ON_GPU is set, but this FAISS build has no GPU support or no GPU"
    return None


@dataclass
class Resources:
    settings: Settings
    engine: EngineClient
    index: FactIndex = field(init=False)
    inflight: InFlight = field(init=False)  # this process's requests by stage (the API's)
    enqueue: Send = send_to_broker

    def __post_init__(self) -> None:
        # Per-user retrieval indexes, bounded (least recently used users' rebuilt on a miss).
        limit_search_threads(self.settings.index_search_threads)
        self.index = FactIndex(
            EMBEDDING_DIM,
            use_gpu=self.settings.index_on_gpu,
            max_bytes=self.settings.index_cache_bytes,
        )
        s = self.settings
        self.inflight = InFlight(s.stuck_request_s)
        self.index.keywords = KeywordCache(s.keyword_cache_bytes, s.retrieval_keyword_weight)

    @functools.cached_property
    def limiter(self) -> RateLimiter:
        """Per-tenant limits in Redis (the API's; connects on first use)."""
        s = self.settings
        return RateLimiter(
            s.redis_url, s.rate_limit_window_s, redis_breaker(s.redis_url, s.redis_retry_after_s)
        )

    @functools.cached_property
    def credentials(self) -> CredentialCache:
        """Resolved API keys, invalidated through Redis (the limiter's connection)."""
        s = self.settings
        limiter = self.limiter
        return CredentialCache(
            limiter.redis, limiter.breaker, s.auth_cache_entries, s.auth_cache_ttl_s
        )

    @functools.cached_property
    def queries(self) -> QueryEmbedder:
        return QueryEmbedder(get_embedder, self.engine, self.settings.query_embedding)

    def warm_up(self) -> threading.Thread:
        """Opens database connections and loads the embedder in the background as the process
        starts, so that its first requests (concurrent searches and chats after a deploy, a
        chat that embeds its query here, a memory written) wait for neither."""

        def warm() -> None:
            try:
                open_connections(self.settings.database_pool_warm)
            except SQLAlchemyError as exc:  # the database is not up yet: requests will say so
                logger.warning("no database connection opened at start: %s", exc)
            get_embedder()

        thread = threading.Thread(target=warm, name="inferscale-warm-up", daemon=True)
        thread.start()
        return thread

    def tenant_context(
        self, session: Session, tenant: TenantId, engine: EngineClient | None = None
    ) -> TenantContext:
        return TenantContext(
            session=session,
            tenant=tenant,
            index=self.index,
            load_embedder=get_embedder,
            queries=self.queries,
            engine=engine or self.engine,
            enqueue=self.enqueue,
        )


@lru_cache
def process_resources() -> Resources:
    """This process's resources (a Celery worker's; anything that is not the API)."""
    settings = get_settings()
    return Resources(settings, EngineClient(settings))
