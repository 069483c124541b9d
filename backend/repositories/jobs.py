"""Jobs: tenant-owned (an encode, an ingestion, an extraction) or platform-wide (tenant None), and
the scans the job pipeline makes over them (``backend.jobs.pipeline``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select, update
from sqlalchemy.orm import Session

from backend.db.models import Job, JobKind, JobStatus


class JobRepository:
    """Jobs may be tenant-owned or platform-wide (tenant None, e.g. scheduled re-encoding)."""

    def __init__(self, session: Session, tenant_id: uuid.UUID | None) -> None:
        self.session = session
        self.tenant_id = tenant_id

    def create(self, kind: JobKind, payload: dict[str, Any], total: int = 0) -> Job:
        job = Job(
            tenant_id=self.tenant_id,
            kind=kind,
            payload=payload,
            progress_total=total,
            status=JobStatus.QUEUED,
        )
        self.session.add(job)
        self.session.flush()
        return job

    def get(self, job_id: uuid.UUID, *, lock: bool = False) -> Job | None:
        """The job (``lock``: its row locked for this transaction), if it is in scope."""
        job = self.session.get(Job, job_id, with_for_update=lock)
        if job is None or (self.tenant_id is not None and job.tenant_id != self.tenant_id):
            return None
        return job

    # ---- the pipeline's scans (platform-wide: tenant None) --------------------------------
    def in_flight(self) -> int:
        """This tenant's jobs sent to the broker and not finished (queued there, or running)."""
        return int(
            self.session.scalar(
                select(func.count())
                .select_from(Job)
                .where(
                    Job.tenant_id == self.tenant_id,
                    Job.dispatched_at.is_not(None),
                    Job.status.in_((JobStatus.QUEUED, JobStatus.RUNNING)),
                )
            )
            or 0
        )

    def held(self, limit: int) -> list[Job]:
        """This tenant's jobs not yet sent (held back for fairness, or the broker was down),
        oldest first, locked."""
        return list(
            self.session.scalars(
                select(Job)
                .where(Job.tenant_id == self.tenant_id, Job.dispatched_at.is_(None))
                .order_by(Job.created_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        )

    def undispatched(self, created_before: datetime, limit: int) -> list[Job]:
        """Jobs whose task has not reached the broker, oldest first, locked (two relays never
        send one job twice)."""
        return list(
            self.session.scalars(
                self._scoped(select(Job))
                .where(Job.dispatched_at.is_(None), Job.created_at < created_before)
                .order_by(Job.created_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        )

    def stalled(self, touched_before: datetime, limit: int) -> list[Job]:
        """Running jobs untouched since ``touched_before``, locked; a job a worker is updating
        right now is skipped (it is alive)."""
        return list(
            self.session.scalars(
                self._scoped(select(Job))
                .where(Job.status == JobStatus.RUNNING, Job.updated_at < touched_before)
                .order_by(Job.updated_at)
                .limit(limit)
                .with_for_update(skip_locked=True)
            )
        )

    def touch_running(self, job_id: uuid.UUID) -> None:
        """A running job's heartbeat."""
        self.session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.RUNNING)
            .values(updated_at=func.now())
        )

    def _scoped(self, query: Select[tuple[Job]]) -> Select[tuple[Job]]:
        return query if self.tenant_id is None else query.where(Job.tenant_id == self.tenant_id)

    def cancel_extractions(self, scope_field: str, value: str) -> int:
        """``infer=true`` jobs of that entity not yet applied: they keep no messages and will
        add nothing (the entity is being deleted). The rows are locked, so a worker applying one
        right now either finished first (its memories are then deleted with the rest) or finds
        it cancelled."""
        jobs = self.session.scalars(
            select(Job)
            .where(
                Job.tenant_id == self.tenant_id,
                Job.kind == JobKind.EXTRACT_MEMORIES,
                Job.payload["scope"][scope_field].astext == value,
            )
            .with_for_update()
        )
        cancelled = 0
        for job in jobs:
            if (job.payload or {}).get("applied"):
                continue
            job.payload = {"scope": job.payload["scope"], "applied": True, "results": []}
            job.status = JobStatus.FAILED
            job.error = "cancelled: its entity was deleted before it ran"
            cancelled += 1
        return cancelled

    def close_ingestion(self, conversation_id: uuid.UUID) -> None:
        """The conversation's ingestion jobs keep no texts and have nothing left to do (it is
        being deleted): a job still queued finds itself ingested and creates nothing."""
        jobs = self.session.scalars(
            select(Job).where(
                Job.tenant_id == self.tenant_id,
                Job.kind == JobKind.INGEST_CONVERSATION,
                Job.payload["conversation_id"].astext == str(conversation_id),
            )
        )
        for job in jobs:
            job.payload = {**(job.payload or {}), "observations": [], "ingested": True}
