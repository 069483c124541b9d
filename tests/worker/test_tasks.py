"""The Celery tasks' shared wrapper: a failing attempt is re-raised for Celery to retry, and
only the last retry's failure is written on the job (with its reason)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from backend.db.models import Job, JobKind
from backend.db.session import session_scope
from backend.repositories.jobs import JobRepository
from worker.tasks import _attempt

pytestmark = pytest.mark.db

TENANT = str(uuid.uuid4())  # no such tenant: nothing of its is held


def _job() -> str:
    with session_scope() as session:
        return str(JobRepository(session, None).create(JobKind.ENCODE_FACTS, {}).id)


def _status(job_id: str) -> tuple[str, str]:
    with session_scope() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        return job.status, job.error


def _broken() -> int:
    raise ConnectionError("runtime unreachable")


def test_only_the_last_retry_marks_the_job_failed(migrated_database: str) -> None:
    job_id = _job()
    early = SimpleNamespace(request=SimpleNamespace(retries=1), max_retries=3)  # a task's counters
    with pytest.raises(ConnectionError):
        _attempt(early, job_id, _broken, TENANT)
    assert _status(job_id)[0] == "queued"  # Celery retries it: not failed yet
    last = SimpleNamespace(request=SimpleNamespace(retries=3), max_retries=3)
    with pytest.raises(ConnectionError):
        _attempt(last, job_id, _broken, TENANT)
    assert _status(job_id) == ("failed", "ConnectionError: runtime unreachable")
    assert _attempt(last, job_id, lambda: 7, TENANT) == 7  # a success passes its result through
