"""The FastAPI application: ``uvicorn backend.main:app`` (or ``create_app()`` in tests)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from backend.api import metrics
from backend.api.errors import install_error_handlers
from backend.api.middleware import BodyLimit, RequestMetrics, UnhandledErrors
from backend.api.routes import (
    admin,
    admin_memories,
    chat,
    conversations,
    health,
    jobs,
    limits,
    mem0,
    memories,
    models,
    operations,
    overview,
    replicas,
)
from backend.core.config import Settings, get_settings
from backend.resources import Resources
from backend.runtime.client import EngineClient
from gpu_runtime.client.inflight import TrackRequests, watch
from gpu_runtime.client.process_probes import freeze_start_up_heap, watch_event_loop

logger = logging.getLogger("backend.inflight")


def create_app(settings: Settings | None = None, engine: EngineClient | None = None) -> FastAPI:
    settings = settings or get_settings()
    resources = Resources(settings=settings, engine=engine or EngineClient(settings))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        resources.warm_up()
        if settings.gc_freeze_at_start:  # config.py says why
            freeze_start_up_heap()
        resources.engine.bind_loop(asyncio.get_running_loop())
        metrics.GC_PAUSES.install()
        watching = asyncio.create_task(
            watch_event_loop(metrics.EVENT_LOOP_LAG, metrics.GC_PAUSES.flush)
        )
        stuck = asyncio.create_task(
            watch(resources.inflight, logger, metrics.publish_in_flight, metrics.count_stuck,
                  on_failure=metrics.count_watch_failure)
        )  # fmt: skip
        try:
            yield
        finally:
            watching.cancel()
            stuck.cancel()
        await resources.engine.aclose()  # the streaming sessions of this event loop

    app = FastAPI(
        title="InferScale",
        version="0.1.0",
        description="Personalized LLM serving: memories injected as KV into vLLM's cache.",
        lifespan=lifespan,
    )
    app.state.resources = resources
    install_error_handlers(app)
    routers = (health, admin, limits, admin_memories, overview, operations, replicas, memories,
               conversations, chat, models, jobs, mem0)  # fmt: skip
    for module in routers:
        app.include_router(module.router)

    app.add_middleware(UnhandledErrors)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(RequestMetrics)
    app.add_middleware(TrackRequests, inflight=resources.inflight)
    return app


def __getattr__(name: str) -> FastAPI:
    # ``uvicorn backend.main:app`` builds the app on first access, not at import.
    if name == "app":
        return create_app()
    raise AttributeError(name)
