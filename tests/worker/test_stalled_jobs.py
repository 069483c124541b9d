"""A job whose worker died (killed, out of memory, its container gone) goes back to the queue:
a running job's heartbeat stops, and beat's relay re-queues it through the outbox, at most
``MAX_RECOVERIES`` times (real Postgres; the broker is the relay's ``send``)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from backend.db.models import Job
from backend.db.session import session_scope
from backend.jobs.pipeline import outbox
from backend.jobs.pipeline.progress import heartbeat

pytestmark = pytest.mark.db

DISPATCH = {"task": "inferscale.encode_facts", "kwargs": {"tenant_id": "t", "fact_ids": []}}


def _job(status: str, age_s: float, **payload: Any) -> uuid.UUID:
    job_id = uuid.uuid4()
    with session_scope() as session:
        session.add(Job(id=job_id, kind="encode", status=status, payload=payload,
                        dispatched_at=datetime.now(UTC)))  # fmt: skip
    with session_scope() as session:  # the heartbeat's column, as it was age_s ago
        stamp = datetime.now(UTC) - timedelta(seconds=age_s)
        session.execute(update(Job).where(Job.id == job_id).values(updated_at=stamp,
                                                                   created_at=stamp))  # fmt: skip
    return job_id


def _get(job_id: uuid.UUID) -> Job:
    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
        return job


def test_a_running_job_without_heartbeat_goes_back_to_the_outbox(
    migrated_database: str,
) -> None:
    dead = _job("running", 300, dispatch=DISPATCH)
    alive = _job("running", 5, dispatch=DISPATCH)
    inline = _job("running", 300)  # run in-process (no task): nothing to send
    waiting = _job("queued", 300, dispatch=DISPATCH)  # not started: the broker still holds it

    assert outbox.recover_stalled(stall_s=120) >= 1
    job = _get(dead)
    assert (job.status, job.dispatched_at, job.payload[outbox.RECOVERED]) == ("queued", None, 1)
    for untouched in (alive, inline, waiting):
        assert _get(untouched).status == ("queued" if untouched == waiting else "running")
        assert _get(untouched).dispatched_at is not None
    # Undispatched with its task: exactly what the relay sends (tests/worker/test_outbox.py;
    # the compose test kills a worker and sees its job finish this way).
    assert job.payload[outbox.DISPATCH] == DISPATCH


def test_a_job_that_keeps_losing_its_worker_fails_instead_of_looping(
    migrated_database: str,
) -> None:
    job_id = _job("running", 300, dispatch=DISPATCH, recovered=outbox.MAX_RECOVERIES)
    outbox.recover_stalled(stall_s=120)
    job = _get(job_id)
    assert job.status == "failed"
    assert job.error == f"its worker stopped while running it {outbox.MAX_RECOVERIES + 1} times"


def test_a_long_step_keeps_its_job_alive_through_the_heartbeat(migrated_database: str) -> None:
    job_id = _job("running", 300, dispatch=DISPATCH)
    before = _get(job_id).updated_at
    with heartbeat(str(job_id), every_s=0.2):
        time.sleep(1.0)  # one long step, no progress written
    beaten = _get(job_id).updated_at
    assert beaten > before + timedelta(seconds=200)
    outbox.recover_stalled(stall_s=120)
    assert _get(job_id).status == "running"  # alive: left alone
    time.sleep(0.5)
    assert _get(job_id).updated_at == beaten  # the heartbeat stopped with the step
