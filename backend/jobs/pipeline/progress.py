"""Job rows: status and progress, each update in its own short transaction so that readers
(API, dashboard) see progress while the job runs."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from backend.db.session import session_scope
from backend.repositories.jobs import JobRepository

logger = logging.getLogger(__name__)


def update_job(job_id: str | None, **fields: Any) -> None:
    if job_id is None:
        return
    with session_scope() as session:
        job = JobRepository(session, None).get(uuid.UUID(job_id))
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


def touch_job(job_id: str) -> None:
    """The running job's heartbeat (``outbox.recover_stalled`` reads it)."""
    with session_scope() as session:
        JobRepository(session, None).touch_running(uuid.UUID(job_id))


@contextmanager
def heartbeat(job_id: str | None, every_s: float) -> Iterator[None]:
    """Touches the job every ``every_s`` while the block runs, from a thread of its own, so a
    long step (a big encode batch) never looks like a dead worker."""
    if job_id is None:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every_s):
            try:
                touch_job(job_id)
            except Exception as exc:  # the database is away: the next beat tries again
                logger.warning("job %s heartbeat failed: %s", job_id, exc)

    thread = threading.Thread(target=beat, name=f"heartbeat-{job_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
