"""Platform-wide aggregates for operators (admin scope: across tenants, read-only)."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from backend.db.models import EndUser, Fact, FactEncoding, RequestLog, Tenant


class OverviewRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def tenants(self) -> list[dict[str, Any]]:
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
        encodings = (
            select(
                FactEncoding.tenant_id,
                func.sum(case((FactEncoding.status == "ready", 1), else_=0)).label("ready"),
                func.sum(case((FactEncoding.status != "ready", 1), else_=0)).label("waiting"),
                func.sum(
                    case((FactEncoding.status == "ready", FactEncoding.nbytes), else_=0)
                ).label("bytes"),
            )
            .group_by(FactEncoding.tenant_id)
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
