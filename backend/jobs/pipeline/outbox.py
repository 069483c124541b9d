"""The jobs outbox: a job's task reaches the broker even if the broker was down at commit.

A job row is written in the same transaction as the rows it works on, with the task to send
(``payload["dispatch"]``). Once the transaction commits the task is sent and the row marked
``dispatched_at``; if the broker is down the write still succeeds, and the row stays
undispatched until ``relay`` (beat, every ``tasks.RELAY_EVERY_S``) sends it; the sender
is ``broker.send_to_broker`` in production. A task may so be sent
twice (sent, then the mark failed): jobs are idempotent.

**Fair across tenants**: a tenant has at most ``INFERSCALE_JOB_TENANT_INFLIGHT`` jobs sent and
unfinished; its next ones are held in the outbox (undispatched) and sent as its jobs finish
(``send_held``, called by the worker when a job ends) or by the relay when it has room, so
another tenant's job waits behind at most that many of a flooding tenant's, not all of them.
Two API processes delivering at the same moment may overshoot the cap by one each (no lock is
taken on the send path); the cap is a fairness bound, not a quota.

A job whose worker died while running it is sent again too (``recover_stalled``): a running job's
worker touches the row every few seconds (its heartbeat); a running job untouched for
``INFERSCALE_JOB_STALL_S`` goes back to the queue through the outbox, at most
``MAX_RECOVERIES`` times (a job that keeps killing its worker fails instead of looping).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from backend.core.config import get_settings
from backend.db.models import Job, JobStatus
from backend.db.session import after_commit, session_scope
from backend.jobs.pipeline.tasks import TaskName
from backend.repositories.jobs import JobRepository

logger = logging.getLogger(__name__)

DISPATCH = "dispatch"  # payload key: {"task": name, "kwargs": {...}}
RELAY_AFTER_S = 10.0  # younger undispatched jobs may still be on their way from the API
RELAY_BATCH = 200
MAX_RECOVERIES = 3
RECOVERED = "recovered"  # payload key: how many times the job was taken back from a dead worker

Send = Callable[[str, dict[str, Any]], None]  # (task name, kwargs) -> sent, or raises


def schedule(
    session: Session, job: Job, task: TaskName, kwargs: dict[str, Any], send: Send
) -> None:
    """Record ``task(**kwargs)`` on the job (this transaction) and send it once it commits."""
    job.payload = {**(job.payload or {}), DISPATCH: {"task": str(task), "kwargs": kwargs}}
    job_id = job.id

    def send_once_committed() -> None:
        deliver(job_id, str(task), kwargs, send)

    after_commit(session, send_once_committed)


def _room(session: Session, tenant_id: uuid.UUID | None) -> int | None:
    """How many more of the tenant's jobs may be sent now (None: no cap, or no tenant)."""
    cap = get_settings().job_tenant_inflight
    if not cap or tenant_id is None:
        return None
    return max(0, cap - JobRepository(session, tenant_id).in_flight())


def deliver(job_id: uuid.UUID, task: str, kwargs: dict[str, Any], send: Send) -> bool:
    """Send now, unless the tenant's fair share of the queues is in use (the job is held in the
    outbox for ``send_held``); on success mark the job dispatched. A broker that is down leaves
    it for ``relay`` (never an error for the caller: what it wrote is committed)."""
    try:
        with session_scope() as session:
            job = JobRepository(session, None).get(job_id)
            if job is not None and _room(session, job.tenant_id) == 0:
                logger.info("job %s held: its tenant's share of the queues is in use", job_id)
                return False
    except Exception:  # the check is fairness, not safety: send rather than strand the job
        logger.exception("fair-share check failed for job %s; sending it", job_id)
    try:
        send(task, kwargs)
    except Exception as exc:
        logger.warning("broker unavailable (%s): job %s stays in the outbox", exc, job_id)
        return False
    try:
        with session_scope() as session:
            job = JobRepository(session, None).get(job_id)
            if job is not None and job.dispatched_at is None:
                job.dispatched_at = datetime.now(UTC)
    except Exception:  # the relay would send it again: harmless, jobs are idempotent
        logger.exception("job %s sent but not marked dispatched", job_id)
    return True


def relay(send: Send, older_than_s: float = RELAY_AFTER_S) -> int:
    """Send every job still undispatched after ``older_than_s``; returns how many were sent.
    Stops at the first send that fails (the broker is still down)."""
    cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
    sent = 0
    room: dict[uuid.UUID | None, int | None] = {}  # per tenant, as this relay goes
    with session_scope() as session:
        for job in JobRepository(session, None).undispatched(cutoff, RELAY_BATCH):
            dispatch = (job.payload or {}).get(DISPATCH)
            if not dispatch:  # nothing to send (a job run inline): close it in the outbox
                job.dispatched_at = datetime.now(UTC)
                continue
            if job.tenant_id not in room:
                room[job.tenant_id] = _room(session, job.tenant_id)
            left = room[job.tenant_id]
            if left == 0:
                continue  # held: sent as the tenant's jobs finish
            if not _send_marked(job, dispatch, send, "relay: broker still unavailable"):
                break
            sent += 1
            if left is not None:
                room[job.tenant_id] = left - 1
    if sent:
        logger.info("relay: sent %d job(s) from the outbox", sent)
    return sent


def send_held(tenant_id: uuid.UUID, send: Send) -> int:
    """A job of the tenant ended: send its held jobs the freed room allows, oldest first."""
    sent = 0
    with session_scope() as session:
        room = _room(session, tenant_id)
        repo = JobRepository(session, tenant_id)
        for job in repo.held(RELAY_BATCH if room is None else room):
            dispatch = (job.payload or {}).get(DISPATCH)
            if not dispatch:
                continue  # run inline, or still being written: not ours to send
            if not _send_marked(job, dispatch, send, "held jobs stay in the outbox (broker)"):
                break
            sent += 1
    return sent


def _send_marked(job: Job, dispatch: dict[str, Any], send: Send, unavailable: str) -> bool:
    """Sends the job's task and marks it dispatched (its row is locked by the caller's scan);
    False, with ``unavailable`` logged, while the broker refuses."""
    try:
        send(dispatch["task"], dispatch["kwargs"])
    except Exception as exc:
        logger.warning("%s: %s", unavailable, exc)
        return False
    job.dispatched_at = datetime.now(UTC)
    return True


def recover_stalled(stall_s: float, max_recoveries: int = MAX_RECOVERIES) -> int:
    """Puts each running job whose heartbeat stopped ``stall_s`` ago back in the outbox (the
    relay sends it); returns how many. Jobs run inline (nothing to send) are left alone."""
    cutoff = datetime.now(UTC) - timedelta(seconds=stall_s)
    recovered = 0
    with session_scope() as session:
        for job in JobRepository(session, None).stalled(cutoff, RELAY_BATCH):
            payload = job.payload or {}
            if not payload.get(DISPATCH):
                continue
            times = int(payload.get(RECOVERED, 0))
            if times >= max_recoveries:
                job.status = JobStatus.FAILED
                job.error = f"its worker stopped while running it {times + 1} times"
                logger.error("job %s failed: %s", job.id, job.error)
                continue
            job.payload = {**payload, RECOVERED: times + 1}
            job.status, job.dispatched_at = JobStatus.QUEUED, None
            recovered += 1
            logger.warning("job %s: no heartbeat for %.0f s, its worker is gone: re-queued",
                           job.id, stall_s)  # fmt: skip
    return recovered
