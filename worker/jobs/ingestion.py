"""Conversation ingestion: facts per turn (or per observation), then an encoding job."""

from __future__ import annotations

import uuid

from backend.db.models import Job
from backend.db.session import session_scope
from backend.services.conversations import ConversationService
from gpu_runtime.types import TenantId
from worker.jobs.progress import update_job
from worker.jobs.resources import tenant_context


def ingest_conversation(tenant_id: str, conversation_id: str, job_id: str | None = None) -> int:
    """Returns the number of facts created; a redelivered job creates none twice."""
    tenant = TenantId(tenant_id)
    update_job(job_id, status="running", attempt=True)
    observations: list[tuple[str, str]] = []
    with session_scope() as session:
        job = session.get(Job, uuid.UUID(job_id)) if job_id else None
        if job is not None:
            observations = [
                (str(t), str(r)) for t, r in (job.payload or {}).get("observations", [])
            ]
    with session_scope() as session:
        created = ConversationService(tenant_context(session, tenant)).ingest(
            uuid.UUID(conversation_id), observations
        )
    update_job(
        job_id,
        status="succeeded",
        progress_done=len(created),
        progress_total=len(created),
        payload_merge={"fact_ids": created},
    )
    return len(created)
