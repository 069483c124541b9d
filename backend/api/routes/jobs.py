"""Job progress (encoding, ingestion) for the tenant that owns the job."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from backend.api.deps import CallerDep, SessionDep
from backend.api.schemas.admin import JobOut
from backend.api.schemas.common import AUTHED, error_responses
from backend.errors import NotFoundError
from backend.repositories.jobs import JobRepository

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=error_responses(*AUTHED))


@router.get("/{job_id}", response_model=JobOut, responses=error_responses(404))
def get_job(job_id: uuid.UUID, caller: CallerDep, session: SessionDep) -> JobOut:
    scope = None if caller.scope == "admin" else caller.tenant_id
    job = JobRepository(session, scope).get(job_id)
    if job is None or (scope is not None and job.tenant_id is None):
        raise NotFoundError(f"job {job_id} not found")
    shown = ("fact_ids", "encoded", "encode_job_id", "message")
    result = {k: v for k, v in (job.payload or {}).items() if k in shown}
    return JobOut(
        id=job.id,
        kind=job.kind,
        status=job.status,
        progress_done=job.progress_done,
        progress_total=job.progress_total,
        error=job.error,
        created_at=job.created_at,
        updated_at=job.updated_at,
        result=result,
    )
