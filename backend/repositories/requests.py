"""Request log (latency per chat request) and idempotency records."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from backend.db.models import IdempotencyRecord, RequestLog
from backend.repositories.base import TenantScoped


class RequestLogRepository(TenantScoped):
    def record(self, **fields: Any) -> RequestLog:
        row = RequestLog(tenant_id=self.tenant_uuid, **fields)
        self.session.add(row)
        return row

    def recent(self, limit: int = 500) -> list[RequestLog]:
        return list(
            self.session.scalars(
                select(RequestLog)
                .where(RequestLog.tenant_id == self.tenant_uuid)
                .order_by(RequestLog.id.desc())
                .limit(limit)
            )
        )


class IdempotencyRepository:
    def __init__(self, session: Session, scope: str) -> None:
        self.session = session
        self.scope = scope

    def get(self, key: str) -> IdempotencyRecord | None:
        return self.session.get(IdempotencyRecord, (self.scope, key))

    def save(self, key: str, request_hash: str, status_code: int, body: Any) -> bool:
        """False if another request stored this key first (the caller replays that one)."""
        result = self.session.execute(
            insert(IdempotencyRecord)
            .values(
                scope=self.scope,
                key=key,
                request_hash=request_hash,
                status_code=status_code,
                body=body,
            )
            .on_conflict_do_nothing()
        )
        return bool(getattr(result, "rowcount", 0))

    def forget_memory(self, memory_id: str) -> int:
        """Drop stored responses that quote the memory (a replay must not bring back deleted
        text); returns how many."""
        result = self.session.execute(
            delete(IdempotencyRecord).where(
                IdempotencyRecord.scope == self.scope,
                IdempotencyRecord.body.contains({"results": [{"id": memory_id}]}),
            )
        )
        return int(getattr(result, "rowcount", 0))

    def forget_all(self) -> int:
        """Every stored response of this scope (a tenant being deleted)."""
        result = self.session.execute(
            delete(IdempotencyRecord).where(IdempotencyRecord.scope == self.scope)
        )
        return int(getattr(result, "rowcount", 0))
