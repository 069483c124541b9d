"""Operators' view of the running platform (admin key only): health of every process, the
runtime's model and live pool statistics, jobs, and the re-encode action. The dashboard reads
only these and the overview routes."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import text

from backend.api.deps import AdminDep, ResourcesDep, SessionDep
from backend.api.schemas.common import AUTHED, error_responses
from backend.db.session import get_engine
from backend.errors import UnavailableError
from backend.jobs.pipeline.broker import ping_workers, send_to_broker
from backend.jobs.pipeline.tasks import TaskName
from backend.repositories.overview import OverviewRepository
from gpu_runtime.types import TenantId

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=error_responses(*AUTHED))


def _database() -> str:
    try:
        with get_engine().connect() as conn:
            conn.execute(text("select 1"))
        return "ok"
    except Exception as exc:
        return f"down: {type(exc).__name__}"


def _workers() -> tuple[str, list[str]]:
    """The broker's state and the Celery workers answering a ping within a second."""
    try:
        return "ok", ping_workers(timeout_s=1.0)
    except Exception as exc:
        return f"down: {type(exc).__name__}", []


@router.get("/status")
async def status(_: AdminDep, resources: ResourcesDep) -> dict[str, Any]:
    """``runtime``: the first replica that is up (``status`` ok while any is); ``replicas``:
    every runtime replica's health, model and pools (``/v1/admin/replicas`` adds placement)."""
    database = await run_in_threadpool(_database)
    broker, workers = await run_in_threadpool(_workers)
    replicas = await run_in_threadpool(resources.engine.replica_status)
    return {"database": database, "broker": broker, "workers": workers,
            "runtime": _runtime(replicas), "replicas": replicas}  # fmt: skip


def _runtime(replicas: list[dict[str, Any]]) -> dict[str, Any]:
    up = [r for r in replicas if r["status"] == "ok"]
    if not up:
        errors = "; ".join(f"{r['url']}: {r['error']}" for r in replicas)
        return {"status": f"down: {errors}" if errors else "down"}
    first = up[0]
    keys = ("model", "dtype", "max_model_len", "block_size", "workers", "pools")
    return {"status": "ok", "replicas_up": len(up), "replicas": len(replicas),
            **{k: first[k] for k in keys}}  # fmt: skip


@router.get("/residency")
async def residency(
    _: AdminDep, resources: ResourcesDep, tenant_id: uuid.UUID | None = None
) -> dict[str, Any]:
    """Live pool statistics, for one tenant or all: every worker rank of every runtime replica
    that answers (each named by its ``replica``), their counts and bytes summed (``totals``:
    under tensor parallelism each rank holds a slice of every fact, so a fact counts once per
    rank and its bytes add up to the whole), and each replica's prefix-cache epoch."""
    name = str(tenant_id) if tenant_id else None
    answers = await run_in_threadpool(resources.engine.stats_everywhere, name)
    workers = [{**w, "replica": url} for url, stats in answers for w in stats.workers]
    totals: dict[str, int] = {}
    for worker in workers:
        for field, value in worker.items():
            if isinstance(value, int) and not isinstance(value, bool):
                totals[field] = totals.get(field, 0) + value
    epochs = {url: stats.epoch for url, stats in answers}
    home = resources.engine.replica_of(TenantId(name)) if name else None
    return {"tenant_id": name, "workers": workers, "totals": totals,
            "epoch": epochs.get(home, 0) if home else 0, "epochs": epochs,
            "replica": home}  # fmt: skip


@router.get("/jobs")
def jobs(
    _: AdminDep,
    session: SessionDep,
    tenant_id: uuid.UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    return {"jobs": OverviewRepository(session).jobs(tenant_id, limit)}


@router.post("/reencode", status_code=202)
def reencode(_: AdminDep) -> dict[str, str]:
    """Runs the scheduled sweep now: facts without a ready encoding, or whose KV was lost."""
    try:
        send_to_broker(TaskName.REENCODE_STALE, {})
    except Exception as exc:
        raise UnavailableError(f"the broker is unavailable ({type(exc).__name__}); retry") from exc
    return {"status": "queued", "task": str(TaskName.REENCODE_STALE)}
