"""Liveness, readiness (database, broker, runtime) and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from backend.api.deps import ResourcesDep
from backend.api.metrics import render as render_metrics
from backend.db.schema import schema_problem
from backend.db.session import get_engine

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "A dependency is down; checks says which"}})
def readyz(resources: ResourcesDep) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        with get_engine().connect() as conn:  # the schema's query is the round trip too
            problem = schema_problem(conn)
        checks["database"] = problem or "ok"
    except Exception as exc:
        checks["database"] = f"down: {type(exc).__name__}"
    try:
        import redis

        redis.Redis.from_url(resources.settings.redis_url, socket_timeout=2).ping()
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"down: {type(exc).__name__}"
    checks["runtime"] = "ok" if resources.engine.ready() else "down"
    ready = all(state == "ok" for state in checks.values())
    served: dict[str, object] = {}
    if checks["runtime"] == "ok":
        model = resources.engine.model()
        # Ready either way: a runtime whose fidelity canary failed serves kv as prompt mode.
        served = {"model": model.model, "fidelity": model.fidelity}
    return JSONResponse(
        {"status": "ready" if ready else "not ready", "checks": checks, **served},
        status_code=200 if ready else 503,
    )


@router.get("/metrics")
def metrics() -> Response:
    return Response(render_metrics(), media_type=CONTENT_TYPE_LATEST)
