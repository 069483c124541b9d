"""The Celery configuration every process shares, and the send-only app the API and the services
use: it knows the broker and the task names, not the tasks (``worker.celery_app`` is the app
that runs them). Celery is loaded on first use: the API starts without it."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from backend.core.breaker import redis_breaker, redis_failures
from backend.core.config import Settings, get_settings
from backend.jobs.pipeline.tasks import GPU_TASKS, Queue, beat_schedule, queue_for

if TYPE_CHECKING:
    from celery import Celery


# A Redis that is gone without closing its connections (a stopped container's address, a host
# off the network) drops our SYNs: without these, a send waited for the kernel to give up on
# the connect (about two minutes), and the API's write that queued a job with it. The outbox
# keeps what was not sent. Longer than any command of ours takes; a worker's BRPOP blocks 1 s.
REDIS_CONNECT_TIMEOUT_S = 2.0
REDIS_SOCKET_TIMEOUT_S = 10.0


def restore_every_s(visibility_timeout_s: int) -> int:
    """How often a worker looks for tasks a dead worker left unacknowledged past the visibility
    timeout. kombu's default is every 10 s times a throttle of 10: a killed worker's job went
    back up to 100 s after its timeout. One ZRANGE on Redis every few seconds costs nothing."""
    return max(1, min(10, visibility_timeout_s // 4))


def celery_config(settings: Settings) -> dict[str, Any]:
    visibility = settings.task_visibility_timeout_s
    return {
        "broker_url": settings.redis_url,
        "result_backend": settings.redis_url,
        "task_default_queue": str(Queue.DEFAULT),
        "task_routes": {str(name): {"queue": str(Queue.GPU)} for name in GPU_TASKS},
        "task_acks_late": True,  # a job whose worker dies is redelivered; jobs are idempotent
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "broker_connection_retry_on_startup": True,
        # Redis redelivers a dead worker's unacknowledged task after this (kombu's default is an
        # hour: a job whose worker was killed sat that long).
        "broker_transport_options": {
            "visibility_timeout": visibility,
            "unacked_restore_interval": restore_every_s(visibility),
            "unacked_restore_throttle": 1,  # every sweep scans (kombu's default: every 10th)
            "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
            "socket_timeout": REDIS_SOCKET_TIMEOUT_S,
        },
        "result_backend_transport_options": {"visibility_timeout": visibility},
        "redis_socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
        "redis_socket_timeout": REDIS_SOCKET_TIMEOUT_S,
        "result_expires": 3600,
        "beat_schedule": beat_schedule(),
    }


def make_celery(settings: Settings, include: list[str] | None = None) -> Celery:
    from celery import Celery

    app = Celery("inferscale", include=include or [])
    app.conf.update(celery_config(settings))
    return app


@lru_cache
def sender() -> Celery:
    """This process's send-only app (the broker from the settings). One connection attempt a
    send (kombu's default is several, ~6 s against an unreachable Redis): every send it makes
    is backed by the outbox, which sends again."""
    app = make_celery(get_settings())
    options = app.conf.broker_transport_options
    app.conf.broker_transport_options = {**options, "max_retries": 0}
    return app


def send_to_broker(task: str, kwargs: dict[str, Any]) -> None:
    """Celery's ``send_task`` to the task's queue; raises if the broker is down, at once while
    the process's Redis breaker is open (the caller's outbox keeps the job). A job's outcome is
    its row in Postgres, so no result is kept (``ignore_result``): waiting for one would
    subscribe to the result backend first, and with Redis unreachable that subscription retried
    for minutes before the send even began."""
    from kombu.exceptions import OperationalError

    settings = get_settings()
    breaker = redis_breaker(settings.redis_url, settings.redis_retry_after_s)
    with breaker.guard((OperationalError, *redis_failures())):
        sender().send_task(
            str(task), kwargs=kwargs, queue=str(queue_for(task)), retry=False, ignore_result=True
        )


def ping_workers(timeout_s: float = 1.0) -> list[str]:
    """The Celery workers answering a ping within ``timeout_s``."""
    replies = sender().control.ping(timeout=timeout_s) or []
    return sorted(name for reply in replies for name in reply)
