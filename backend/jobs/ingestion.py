"""The ingestion use case: a conversation's facts per turn (or per observation), then an
encoding job."""

from __future__ import annotations

import uuid

from backend.core.locomo import ConversationMemories
from backend.db.models import JobStatus
from backend.db.session import session_scope
from backend.jobs.pipeline.progress import update_job
from backend.repositories.jobs import JobRepository
from backend.resources import process_resources
from backend.services.conversations import ConversationService
from gpu_runtime.types import TenantId


def ingest_conversation(tenant_id: str, conversation_id: str, job_id: str | None = None) -> int:
    """Returns the number of facts created; a redelivered job creates none twice.

    The observations' texts travel in the job's payload only until they are facts: the same
    transaction that creates the facts empties them (a deleted memory must not live on in a job
    row) and marks the job ingested, so a redelivery does nothing."""
    tenant = TenantId(tenant_id)
    update_job(job_id, status=JobStatus.RUNNING, attempt=True)
    with session_scope() as session:
        job = JobRepository(session, None).get(uuid.UUID(job_id)) if job_id else None
        payload = dict(job.payload or {}) if job is not None else {}
        if payload.get("ingested"):
            created: list[str] = []
            encode_job = None
        else:
            observations = [(str(t), str(r)) for t, r in payload.get("observations", [])]
            # (a job queued before the choice existed kept the observations)
            memories = ConversationMemories(payload.get("memories", "observations"))
            ctx = process_resources().tenant_context(session, tenant)
            created, encode_job = ConversationService(ctx).ingest(
                uuid.UUID(conversation_id), observations, memories
            )
            if job is not None:
                job.payload = {**payload, "observations": [], "ingested": True}
    # A redelivered job creates nothing and must not erase what the first run recorded.
    recorded = {"fact_ids": created, "encode_job_id": str(encode_job)} if created else {}
    update_job(
        job_id,
        status=JobStatus.SUCCEEDED,
        **({"progress_done": len(created), "progress_total": len(created)} if created else {}),
        payload_merge=recorded,
    )
    return len(created)
