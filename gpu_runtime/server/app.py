"""The runtime server's FastAPI app. The engine starts with the process, in the background:
``/healthz`` answers at once, ``/readyz`` and the API only once the engine is up."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpu_runtime.client.inflight import TrackRequests, watch
from gpu_runtime.client.process_probes import freeze_start_up_heap, watch_event_loop
from gpu_runtime.client.protocol import RUNTIME_ID_HEADER
from gpu_runtime.config import RuntimeSettings, cuda_available
from gpu_runtime.query_embedder import QueryEmbedder
from gpu_runtime.runtime import InjectionRuntime
from gpu_runtime.server import metrics
from gpu_runtime.server.assets import load_assets
from gpu_runtime.server.canary import run_canary
from gpu_runtime.server.errors import install_error_handlers
from gpu_runtime.server.routes import api, probes
from gpu_runtime.server.state import ServerState

logger = logging.getLogger(__name__)


ENGINE_WATCH_S = 1.0


def _stop_serving(state: ServerState, failure: str) -> None:
    """The process cannot serve: stop the server; ``__main__`` then exits non-zero with
    ``failure``, so a supervisor (compose's restart policy) restarts it."""
    state.failure = " ".join(failure.split())
    if state.stop_server is not None:
        state.stop_server()
    else:  # an app served by someone else's uvicorn: its signal handler stops it
        os.kill(os.getpid(), signal.SIGTERM)


async def _start_engine(state: ServerState) -> None:
    try:
        runtime = await InjectionRuntime.start(state.settings)
        state.workers = runtime.workers
    except Exception as exc:
        logger.exception("the engine did not start")
        _stop_serving(state, f"the engine did not start: {type(exc).__name__}: {exc}")
        return
    try:
        state.embedder = await asyncio.to_thread(load_query_embedder, state.settings)
    except Exception as exc:  # only "on" gets here: "auto" degrades to the API's own pass
        logger.exception("the query embedder did not load")
        runtime.shutdown()
        _stop_serving(state, f"the query embedder did not load: {type(exc).__name__}: {exc}")
        return
    await _fidelity_canary(state, runtime)
    if state.settings.gc_freeze_at_start:  # config.py says why
        freeze_start_up_heap()
    state.runtime = runtime
    logger.info("engine ready: workers %s", state.workers)
    while not runtime.dead:  # vLLM marks the engine errored for good when its core dies
        await asyncio.sleep(ENGINE_WATCH_S)
    logger.error("the engine died: exiting so that the runtime is restarted")
    _stop_serving(state, "the engine died (its core process exited)")


async def _fidelity_canary(state: ServerState, runtime: InjectionRuntime) -> None:
    """Injected KV against prompt mode on the served model (``canary.py``); a failure, or a
    canary that cannot run, turns injection off: requests are served, as prompt mode."""
    threshold = state.settings.canary_max_divergence_nats
    if threshold is None:
        return
    if state.settings.load_format == "dummy":  # random weights say nothing about fidelity
        logger.info("fidelity canary skipped: dummy weights (timing runs)")
        return
    try:
        state.canary = result = await run_canary(runtime, state.assets, threshold)
    except Exception as exc:
        logger.exception("the fidelity canary could not run")
        runtime.injection_off = f"the fidelity canary could not run: {exc!r}"
        return
    if result.passed:
        logger.info("fidelity canary passed: %s (%.1f s)", result.detail, result.seconds)
        return
    runtime.injection_off = f"the fidelity canary failed: {result.detail}"
    logger.error(
        "FIDELITY CANARY FAILED on this model: %s. Injected KV does not behave like the prompt; "
        "kv and hybrid requests are served as prompt mode until this is fixed.",
        result.detail,
    )


def load_query_embedder(settings: RuntimeSettings) -> QueryEmbedder | None:
    """The API's query embedder on this device, loaded after the engine has started (its
    processes are spawned by then, so CUDA initialised here reaches none of them)."""
    wanted = settings.query_embedder
    if wanted == "off" or (wanted == "auto" and not cuda_available()):
        return None
    import torch

    device = torch.device("cuda" if cuda_available() else "cpu")
    try:
        return QueryEmbedder.load(
            device,
            graphs=settings.query_embedder_graphs,
            in_thread=settings.query_embedder_runs_on == "thread",
        )
    except Exception:
        if wanted == "on":
            raise
        logger.warning("query embedder unavailable; the API embeds queries itself", exc_info=True)
        return None


def create_app(settings: RuntimeSettings | None = None) -> FastAPI:
    settings = settings or RuntimeSettings()
    assets = load_assets(settings.resolved_tokenizer_path, settings.chat_template)
    state = ServerState(settings, assets)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        metrics.GC_PAUSES.install()
        watching = asyncio.create_task(
            watch_event_loop(metrics.EVENT_LOOP_LAG, metrics.GC_PAUSES.flush)
        )
        stuck = asyncio.create_task(
            watch(state.inflight, logger, on_stuck=metrics.count_stuck,
                  on_failure=metrics.count_watch_failure)
        )  # fmt: skip
        starting = asyncio.ensure_future(_start_engine(state))
        try:
            yield
        finally:
            starting.cancel()
            watching.cancel()
            stuck.cancel()
            if state.runtime is not None:
                state.runtime.shutdown()

    app = FastAPI(
        title="InferScale runtime",
        version="1",
        description="The GPU runtime's internal API: generate with injected KV, encode, purge.",
        lifespan=lifespan,
    )
    app.state.server = state
    install_error_handlers(app)
    app.include_router(probes)
    app.include_router(api)

    app.add_middleware(IdentifyRuntime, runtime_id=state.runtime_id)
    app.add_middleware(TrackRequests, inflight=state.inflight)
    return app


class IdentifyRuntime:
    """Names the runtime instance on every answer (plain ASGI: Starlette's ``BaseHTTPMiddleware``
    would relay every streamed chunk through an extra task and memory stream)."""

    def __init__(self, app: ASGIApp, runtime_id: str) -> None:
        self.app = app
        self.header = (RUNTIME_ID_HEADER.lower().encode(), runtime_id.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self.header]
            await send(message)

        await self.app(scope, receive, named)
