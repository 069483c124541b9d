"""Job rows: status and progress, each update in its own short transaction so that readers
(API, dashboard) see progress while the job runs."""

from __future__ import annotations

import uuid
from typing import Any

from backend.db.models import Job
from backend.db.session import session_scope


def update_job(job_id: str | None, **fields: Any) -> None:
    if job_id is None:
        return
    with session_scope() as session:
        job = session.get(Job, uuid.UUID(job_id))
        if job is None:
            return
        for name, value in fields.items():
            if name == "progress_add":
                job.progress_done = min(job.progress_total or 10**9, job.progress_done + value)
            elif name == "payload_merge":
                job.payload = {**(job.payload or {}), **value}
            elif name == "attempt":
                job.attempts += 1
            else:
                setattr(job, name, value)
