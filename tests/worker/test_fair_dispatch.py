"""Fair background work: a tenant's jobs in the broker's queues are capped
(``INFERSCALE_JOB_TENANT_INFLIGHT``, 2 by default); the rest wait in the outbox and go as its
jobs end, so another tenant's job is sent at once instead of queueing behind a bulk import.
Real Postgres; the broker is the outbox's ``send`` (recorded here)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from backend.core.config import get_settings
from backend.db.models import Job, JobKind, JobStatus, Tenant
from backend.db.session import session_scope
from backend.jobs.pipeline import outbox
from backend.jobs.pipeline.tasks import TaskName
from backend.repositories.jobs import JobRepository

pytestmark = pytest.mark.db


class Broker:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def __call__(self, task: str, kwargs: dict[str, Any]) -> None:
        self.sent.append(str(kwargs.get("job_id")))  # (the relay may send others' jobs too)


def _tenant() -> uuid.UUID:
    with session_scope() as session:
        tenant = Tenant(name=f"fair-{uuid.uuid4().hex[:8]}")
        session.add(tenant)
        session.flush()
        return tenant.id


def _schedule(tenant: uuid.UUID, broker: Broker) -> str:
    """A job written and scheduled as a service does: sent once its transaction commits."""
    with session_scope() as session:
        job = JobRepository(session, tenant).create(JobKind.ENCODE_FACTS, {})
        session.flush()
        job_id = str(job.id)
        kwargs = {"tenant_id": str(tenant), "fact_ids": [], "job_id": job_id}
        outbox.schedule(session, job, TaskName.ENCODE_FACTS, kwargs, broker)
    return job_id


def _finish(job_id: str) -> None:
    with session_scope() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        job.status = JobStatus.SUCCEEDED


def test_a_flooding_tenant_is_capped_and_another_tenants_job_goes_at_once(
    migrated_database: str,
) -> None:
    assert get_settings().job_tenant_inflight == 2
    a, b, broker = _tenant(), _tenant(), Broker()
    flood = [_schedule(a, broker) for _ in range(5)]
    assert broker.sent == flood[:2]  # two in the queues, three held in the outbox
    light = _schedule(b, broker)
    assert broker.sent[-1] == light  # B's job is the third in the queue, not the sixth
    outbox.relay(broker, older_than_s=0)
    assert [j for j in broker.sent if j in flood] == flood[:2]  # the relay respects the cap too
    _finish(flood[0])
    assert outbox.send_held(a, broker) == 1
    assert broker.sent[-1] == flood[2]  # oldest held first, as room frees
    _finish(flood[1])
    _finish(flood[2])
    outbox.relay(broker, older_than_s=0)  # the relay, too, sends what the room allows
    assert [j for j in broker.sent if j in flood] == flood


def test_without_a_cap_every_job_is_sent_at_once(
    migrated_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(get_settings(), "job_tenant_inflight", 0)
    a, broker = _tenant(), Broker()
    jobs = [_schedule(a, broker) for _ in range(4)]
    assert broker.sent == jobs
