"""Celery tasks: thin, named by ``TaskName``, taking ids only; each runs a use case of
``backend.jobs`` (``_attempt``: with its heartbeat, and the last retry's failure recorded)."""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable
from typing import Any

from backend.core.config import get_settings
from backend.db.models import JobStatus
from backend.errors import UnavailableError
from backend.jobs import encoding, extraction, ingestion
from backend.jobs.pipeline import outbox
from backend.jobs.pipeline.broker import send_to_broker
from backend.jobs.pipeline.progress import heartbeat, update_job
from backend.jobs.pipeline.tasks import TaskName
from worker.celery_app import celery_app

logger = logging.getLogger(__name__)

RETRY = {
    "bind": True,
    "autoretry_for": (Exception,),
    "retry_backoff": True,
    "retry_backoff_max": 60,
    "retry_kwargs": {"max_retries": 3},
}
# A runtime that is (re)starting answers 503 for a minute or more (vLLM loads, compiles and
# captures its graphs): a job waits for it, 1, 2, 4 ... 30 s apart (about eight minutes in all),
# instead of failing after the three quick retries above and waiting for the beat's sweep.
UNAVAILABLE_RETRIES = 20
UNAVAILABLE_BACKOFF_MAX_S = 30


@celery_app.task(name=TaskName.PING)  # type: ignore[untyped-decorator]
def ping(token: str) -> dict[str, str]:
    """Health round trip: proves the broker delivers and a worker answers."""
    return {"token": token, "worker": socket.gethostname()}


def _attempt(task: Any, job_id: str | None, run: Callable[[], int], tenant_id: str) -> int:
    """Runs a job with its heartbeat; when its last retry fails too, the job records why before
    Celery does. A runtime unavailable (503: restarting, every replica down) is waited for.
    Once the job has ended, the tenant's held jobs get its room in the queues."""
    try:
        with heartbeat(job_id, get_settings().job_stall_s / 4):
            done = run()
    except Exception as exc:
        retries, waiting = task.request.retries, isinstance(exc, UnavailableError)
        if waiting and retries < UNAVAILABLE_RETRIES:
            countdown = min(UNAVAILABLE_BACKOFF_MAX_S, 2**retries)
            logger.warning("job %s waits %d s for the runtime: %s", job_id, countdown, exc)
            raise task.retry(exc=exc, countdown=countdown, max_retries=UNAVAILABLE_RETRIES) from exc
        if waiting or retries >= task.max_retries:  # its last attempt
            update_job(job_id, status=JobStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
            _send_held(tenant_id)
        raise
    _send_held(tenant_id)
    return done


def _send_held(tenant_id: str) -> None:
    try:
        outbox.send_held(uuid.UUID(tenant_id), send_to_broker)
    except Exception:  # the relay sends them anyway
        logger.exception("held jobs of tenant %s not sent now", tenant_id)


@celery_app.task(name=TaskName.ENCODE_FACTS, **RETRY)  # type: ignore[untyped-decorator]
def encode_facts(self: Any, tenant_id: str, fact_ids: list[str], job_id: str | None = None) -> int:
    return _attempt(
        self, job_id, lambda: encoding.encode_facts(tenant_id, fact_ids, job_id), tenant_id
    )


@celery_app.task(name=TaskName.INGEST_CONVERSATION, **RETRY)  # type: ignore[untyped-decorator]
def ingest_conversation(
    self: Any, tenant_id: str, conversation_id: str, job_id: str | None = None
) -> int:
    return _attempt(
        self,
        job_id,
        lambda: ingestion.ingest_conversation(tenant_id, conversation_id, job_id),
        tenant_id,
    )


@celery_app.task(name=TaskName.EXTRACT_MEMORIES, **RETRY)  # type: ignore[untyped-decorator]
def extract_memories(self: Any, tenant_id: str, job_id: str) -> int:
    """Mem0's infer=true add: facts extracted and reconciled by the served model."""
    return _attempt(self, job_id, lambda: extraction.extract_memories(tenant_id, job_id), tenant_id)


@celery_app.task(name=TaskName.RELAY_OUTBOX)  # type: ignore[untyped-decorator]
def relay_outbox() -> int:
    """Jobs whose worker died are put back; jobs whose task did not reach the broker at commit
    (it was down), and those, are sent now."""
    outbox.recover_stalled(get_settings().job_stall_s)
    return outbox.relay(send_to_broker)


@celery_app.task(name=TaskName.REENCODE_STALE)  # type: ignore[untyped-decorator]
def reencode_stale() -> int:
    return encoding.reencode_stale()


@celery_app.task(name=TaskName.PURGE_SUPERSEDED)  # type: ignore[untyped-decorator]
def purge_superseded() -> int:
    """KV an earlier encoding config wrote, each fact's once it is ready under today's config."""
    return encoding.purge_superseded()
