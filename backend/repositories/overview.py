"""Platform-wide aggregates for operators (admin scope: across tenants, read-only)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select, true
from sqlalchemy.orm import Session

from backend.db.models import (
    EncodingStatus,
    EndUser,
    Fact,
    FactEncoding,
    Job,
    RequestLog,
    Tenant,
)
from gpu_runtime.types import EncodingConfig


class OverviewRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def tenants(self, config: EncodingConfig | None = None) -> list[dict[str, Any]]:
        """Per tenant: users, live facts, and their current versions' encodings under
        ``config`` (the runtime's; any config when it is unknown): ready, pending, failed."""
        current = (
            (FactEncoding.model == config.model)
            & (FactEncoding.window == config.window)
            & (FactEncoding.encoding_version == config.version)
            if config is not None
            else true()
        )
        users = (
            select(EndUser.tenant_id, func.count().label("n"))
            .group_by(EndUser.tenant_id)
            .subquery()
        )
        facts = (
            select(Fact.tenant_id, func.count().label("n"))
            .where(Fact.deleted_at.is_(None))
            .group_by(Fact.tenant_id)
            .subquery()
        )
        # Per live fact, at its current version: is some encoding ready (and how big)? Facts
        # whose job has not recorded anything yet count as waiting; deleted facts and older
        # versions count for nothing.
        ready = (
            select(
                FactEncoding.fact_id,
                func.max(FactEncoding.nbytes).label("nbytes"),
            )
            .join(Fact, Fact.id == FactEncoding.fact_id)
            .where(
                FactEncoding.status == EncodingStatus.READY,
                current,
                FactEncoding.fact_version == Fact.version,
                Fact.deleted_at.is_(None),
            )
            .group_by(FactEncoding.fact_id)
            .subquery()
        )
        # Live facts whose current version's last encoding attempt failed (and none is ready).
        failed = (
            select(FactEncoding.fact_id)
            .join(Fact, Fact.id == FactEncoding.fact_id)
            .where(
                FactEncoding.status == EncodingStatus.FAILED,
                FactEncoding.fact_version == Fact.version,
                current,
            )
            .group_by(FactEncoding.fact_id)
            .subquery()
        )
        not_ready = ready.c.fact_id.is_(None)
        encodings = (
            select(
                Fact.tenant_id,
                func.count(ready.c.fact_id).label("ready"),
                func.count().filter(not_ready, failed.c.fact_id.is_(None)).label("waiting"),
                func.coalesce(func.sum(ready.c.nbytes), 0).label("bytes"),
                func.count().filter(not_ready, failed.c.fact_id.is_not(None)).label("failed"),
            )
            .outerjoin(ready, ready.c.fact_id == Fact.id)
            .outerjoin(failed, failed.c.fact_id == Fact.id)
            .where(Fact.deleted_at.is_(None))
            .group_by(Fact.tenant_id)
            .subquery()
        )
        rows = self.session.execute(
            select(
                Tenant.id,
                Tenant.name,
                func.coalesce(users.c.n, 0),
                func.coalesce(facts.c.n, 0),
                func.coalesce(encodings.c.ready, 0),
                func.coalesce(encodings.c.waiting, 0),
                func.coalesce(encodings.c.bytes, 0),
                func.coalesce(encodings.c.failed, 0),
            )
            .outerjoin(users, users.c.tenant_id == Tenant.id)
            .outerjoin(facts, facts.c.tenant_id == Tenant.id)
            .outerjoin(encodings, encodings.c.tenant_id == Tenant.id)
            .where(Tenant.deleted_at.is_(None))
            .order_by(Tenant.created_at)
        ).all()
        return [
            {
                "tenant_id": str(r[0]),
                "name": r[1],
                "users": int(r[2]),
                "facts": int(r[3]),
                "encodings_ready": int(r[4]),
                "encodings_waiting": int(r[5]),
                "kv_bytes": int(r[6]),
                "encodings_failed": int(r[7]),
            }
            for r in rows
        ]

    def requests(self, tenant_id: uuid.UUID | None, limit: int) -> list[dict[str, Any]]:
        query = select(RequestLog).order_by(RequestLog.id.desc()).limit(limit)
        if tenant_id is not None:
            query = query.where(RequestLog.tenant_id == tenant_id)
        return [
            {
                "tenant_id": str(r.tenant_id),
                "created_at": r.created_at.isoformat(),
                "k": r.k,
                "mode": r.mode,
                "ttft_ms": r.ttft_ms,
                "total_ms": r.total_ms,
                "injected_tokens": r.injected_tokens,
                "prompt_tokens": r.prompt_tokens,
                "completion_tokens": r.completion_tokens,
            }
            for r in self.session.scalars(query)
        ]

    def jobs(self, tenant_id: uuid.UUID | None, limit: int) -> list[dict[str, Any]]:
        """Newest first: ingestion and encoding jobs with their progress and errors."""
        query = select(Job, Tenant.name).outerjoin(Tenant, Tenant.id == Job.tenant_id)
        if tenant_id is not None:
            query = query.where(Job.tenant_id == tenant_id)
        rows = self.session.execute(query.order_by(Job.created_at.desc()).limit(limit)).all()
        return [
            {
                "id": str(job.id),
                "tenant_id": str(job.tenant_id) if job.tenant_id else None,
                "tenant": name or "",
                "kind": job.kind,
                "status": job.status,
                "progress_done": job.progress_done,
                "progress_total": job.progress_total,
                "attempts": job.attempts,
                "error": job.error,
                "created_at": job.created_at.isoformat(),
                "updated_at": job.updated_at.isoformat(),
                "dispatched": job.dispatched_at is not None,
            }
            for job, name in rows
        ]
