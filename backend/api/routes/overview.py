"""Operator views (admin): per-tenant memory and cache residency, recent request latency."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query

from backend.api import metrics
from backend.api.deps import AdminDep, ResourcesDep, SessionDep
from backend.api.schemas.common import AUTHED, error_responses
from backend.errors import AppError
from backend.repositories.overview import OverviewRepository
from gpu_runtime.types import EncodingConfig, TenantId

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=error_responses(*AUTHED))


@router.get("/overview")
def overview(_: AdminDep, session: SessionDep, resources: ResourcesDep) -> dict[str, Any]:
    """Encodings count under the runtime's current config; while it is down, under any."""
    try:
        config: EncodingConfig | None = resources.engine.encoding_config()
    except AppError:
        config = None
    tenants = OverviewRepository(session).tenants(config)
    for row in tenants:  # the runtime replica that serves it now
        row["replica"] = resources.engine.replica_of(TenantId(row["tenant_id"]))
    return {
        "tenants": tenants,
        "config": None if config is None else {
            "model": config.model, "window": config.window, "version": config.version},
    }  # fmt: skip


@router.get("/requests")
def requests(
    _: AdminDep,
    session: SessionDep,
    tenant_id: uuid.UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 500,
) -> dict[str, Any]:
    return {"requests": OverviewRepository(session).requests(tenant_id, limit)}


GATE_FIELDS = ("running", "waiting", "admitted", "queued", "queue_wait_s", "prefill_tokens",
               "decode_tokens")  # fmt: skip


@router.get("/fairness")
def fairness(_: AdminDep, session: SessionDep, resources: ResourcesDep) -> dict[str, Any]:
    """Per tenant: its limits' use this window and its 429s (Redis), and its side of the
    runtime's fair gate summed over the replicas (absent while no replica answers)."""
    gates: dict[str, dict[str, float]] = {}
    try:
        for _url, stats in resources.engine.stats_everywhere():
            for tenant, row in stats.fairness.items():
                mine = gates.setdefault(tenant, dict.fromkeys(GATE_FIELDS, 0.0))
                for name in GATE_FIELDS:
                    mine[name] += float(row.get(name, 0.0))
    except AppError:
        gates = {}
    rows = []
    for listed in OverviewRepository(session).tenants(None):
        tid = TenantId(str(listed["tenant_id"]))
        rows.append({"tenant_id": tid.value, "name": listed["name"],
                     **resources.limiter.usage(tid), "gate": gates.get(tid.value)})  # fmt: skip
    return {"tenants": rows, "runtime": bool(gates) or None}


@router.get("/in-flight")
def in_flight(_: AdminDep, resources: ResourcesDep) -> dict[str, Any]:
    """Requests in flight by stage, and those reported stuck (no progress for
    ``INFERSCALE_STUCK_REQUEST_S``): the API's, over its processes, and each runtime replica's
    (``gpu_runtime/client/inflight.py``)."""
    try:
        runtimes = [{"replica": url, "in_flight": stats.in_flight}
                    for url, stats in resources.engine.stats_everywhere()]  # fmt: skip
    except AppError:
        runtimes = []
    return {"api": metrics.requests_in_flight(), "runtimes": runtimes}
