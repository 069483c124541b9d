"""The FastAPI application: ``uvicorn backend.main:app`` (or ``create_app()`` in tests)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response

from backend.api.errors import install_error_handlers
from backend.api.metrics import HTTP_REQUESTS
from backend.api.resources import Resources
from backend.api.routes import admin, chat, conversations, health, jobs, memories, overview
from backend.core.config import Settings, get_settings
from backend.engine_client import EngineClient, InProcessEngineClient
from gpu_runtime.config import RuntimeSettings


def create_app(settings: Settings | None = None, engine: EngineClient | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(
        title="InferScale",
        version="0.1.0",
        description="Personalized LLM serving: memories injected as KV into vLLM's cache.",
    )
    app.state.resources = Resources(
        settings=settings, engine=engine or InProcessEngineClient(RuntimeSettings())
    )
    install_error_handlers(app)
    for module in (health, admin, overview, memories, conversations, chat, jobs):
        app.include_router(module.router)

    @app.middleware("http")
    async def count_requests(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        HTTP_REQUESTS.labels(request.method, path, str(response.status_code)).inc()
        return response

    return app


def __getattr__(name: str) -> FastAPI:
    # ``uvicorn backend.main:app`` builds the app on first access, not at import.
    if name == "app":
        return create_app()
    raise AttributeError(name)
