"""Fact encodings (which KV exists for which fact version and config) and jobs."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from backend.db.models import Fact, FactEncoding, Job
from backend.repositories.base import TenantScoped
from gpu_runtime.types import EncodingConfig


class EncodingRepository(TenantScoped):
    def ensure_pending(self, fact: Fact, config: EncodingConfig) -> FactEncoding:
        """Idempotent: the row for (fact version, config) is created once, whoever asks."""
        self.session.execute(
            insert(FactEncoding)
            .values(
                tenant_id=self.tenant_uuid,
                fact_id=fact.id,
                fact_version=fact.version,
                model=config.model,
                window=config.window,
                encoding_version=config.version,
                status="pending",
            )
            .on_conflict_do_nothing()
        )
        row = self.get(fact.id, fact.version, config)
        assert row is not None
        return row

    def get(self, fact_id: int, fact_version: int, config: EncodingConfig) -> FactEncoding | None:
        return self.session.scalar(
            select(FactEncoding).where(
                FactEncoding.tenant_id == self.tenant_uuid,
                FactEncoding.fact_id == fact_id,
                FactEncoding.fact_version == fact_version,
                FactEncoding.model == config.model,
                FactEncoding.window == config.window,
                FactEncoding.encoding_version == config.version,
            )
        )

    def for_fact(self, fact_id: int) -> list[FactEncoding]:
        return list(
            self.session.scalars(
                select(FactEncoding)
                .where(FactEncoding.tenant_id == self.tenant_uuid, FactEncoding.fact_id == fact_id)
                .order_by(FactEncoding.id)
            )
        )

    def ready(self, config: EncodingConfig, after_id: int = 0, limit: int = 1000) -> list[Fact]:
        """Live facts whose current version is ready under ``config``, by id after ``after_id``."""
        return list(
            self.session.scalars(
                select(Fact)
                .join(FactEncoding, FactEncoding.fact_id == Fact.id)
                .where(
                    Fact.tenant_id == self.tenant_uuid,
                    Fact.deleted_at.is_(None),
                    Fact.id > after_id,
                    FactEncoding.fact_version == Fact.version,
                    FactEncoding.model == config.model,
                    FactEncoding.window == config.window,
                    FactEncoding.encoding_version == config.version,
                    FactEncoding.status == "ready",
                )
                .order_by(Fact.id)
                .limit(limit)
            )
        )

    def missing(self, config: EncodingConfig, limit: int = 500) -> list[Fact]:
        """Live facts whose current version has no ready encoding under ``config``."""
        ready = (
            select(FactEncoding.fact_id)
            .where(
                FactEncoding.tenant_id == self.tenant_uuid,
                FactEncoding.fact_id == Fact.id,
                FactEncoding.fact_version == Fact.version,
                FactEncoding.model == config.model,
                FactEncoding.window == config.window,
                FactEncoding.encoding_version == config.version,
                FactEncoding.status == "ready",
            )
            .exists()
        )
        return list(
            self.session.scalars(
                select(Fact)
                .where(Fact.tenant_id == self.tenant_uuid, Fact.deleted_at.is_(None), ~ready)
                .order_by(Fact.id)
                .limit(limit)
            )
        )


class JobRepository:
    """Jobs may be tenant-owned or platform-wide (tenant None, e.g. scheduled re-encoding)."""

    def __init__(self, session: Session, tenant_id: uuid.UUID | None) -> None:
        self.session = session
        self.tenant_id = tenant_id

    def create(self, kind: str, payload: dict[str, Any], total: int = 0) -> Job:
        job = Job(
            tenant_id=self.tenant_id,
            kind=kind,
            payload=payload,
            progress_total=total,
            status="queued",
        )
        self.session.add(job)
        self.session.flush()
        return job

    def get(self, job_id: uuid.UUID) -> Job | None:
        job = self.session.get(Job, job_id)
        if job is None or (self.tenant_id is not None and job.tenant_id != self.tenant_id):
            return None
        return job

    def cancel_extractions(self, scope_field: str, value: str) -> int:
        """``infer=true`` jobs of that entity not yet applied: they keep no messages and will
        add nothing (the entity is being deleted). The rows are locked, so a worker applying one
        right now either finished first (its memories are then deleted with the rest) or finds
        it cancelled."""
        jobs = self.session.scalars(
            select(Job)
            .where(
                Job.tenant_id == self.tenant_id,
                Job.kind == "extract_memories",
                Job.payload["scope"][scope_field].astext == value,
            )
            .with_for_update()
        )
        cancelled = 0
        for job in jobs:
            if (job.payload or {}).get("applied"):
                continue
            job.payload = {"scope": job.payload["scope"], "applied": True, "results": []}
            job.status, job.error = "failed", "cancelled: its entity was deleted before it ran"
            cancelled += 1
        return cancelled

    def close_ingestion(self, conversation_id: uuid.UUID) -> None:
        """The conversation's ingestion jobs keep no texts and have nothing left to do (it is
        being deleted): a job still queued finds itself ingested and creates nothing."""
        jobs = self.session.scalars(
            select(Job).where(
                Job.tenant_id == self.tenant_id,
                Job.kind == "ingest_conversation",
                Job.payload["conversation_id"].astext == str(conversation_id),
            )
        )
        for job in jobs:
            job.payload = {**(job.payload or {}), "observations": [], "ingested": True}
