"""The Celery tasks' shared wrapper: a failing attempt is re-raised for Celery to retry (a runtime
that is restarting waited for longer), and
only the last retry's failure is written on the job (with its reason)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from backend.db.models import Job, JobKind
from backend.db.session import session_scope
from backend.errors import UnavailableError
from backend.repositories.jobs import JobRepository
from worker.tasks import UNAVAILABLE_BACKOFF_MAX_S, UNAVAILABLE_RETRIES, _attempt

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


class _Retry(Exception):
    """What Celery's ``task.retry`` raises (celery.exceptions.Retry), with its arguments."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__()
        self.kwargs = kwargs


def _task(retries: int) -> SimpleNamespace:
    def retry(**kwargs: object) -> _Retry:
        return _Retry(**kwargs)

    return SimpleNamespace(request=SimpleNamespace(retries=retries), max_retries=3, retry=retry)


def _restarting() -> int:
    raise UnavailableError("the model runtime is unavailable: starting")


def test_a_restarting_runtime_is_waited_for_past_the_quick_retries(migrated_database: str) -> None:
    job_id = _job()
    for retries, countdown in [(0, 1), (3, 8), (10, UNAVAILABLE_BACKOFF_MAX_S)]:
        with pytest.raises(_Retry) as raised:
            _attempt(_task(retries), job_id, _restarting, TENANT)
        assert raised.value.kwargs["countdown"] == countdown
        assert raised.value.kwargs["max_retries"] == UNAVAILABLE_RETRIES
        assert _status(job_id)[0] == "queued"  # still waiting, not failed
    with pytest.raises(UnavailableError):  # past its patience: failed, with the reason
        _attempt(_task(UNAVAILABLE_RETRIES), job_id, _restarting, TENANT)
    reason = "UnavailableError: the model runtime is unavailable: starting"
    assert _status(job_id) == ("failed", reason)
    # other failures keep the three quick retries
    with pytest.raises(ConnectionError):
        _attempt(_task(3), _job(), _broken, TENANT)
