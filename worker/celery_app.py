"""The Celery application: Redis broker and result backend from backend settings."""

from __future__ import annotations

from celery import Celery

from backend.core.config import get_settings
from backend.services.outbox import RELAY_EVERY_S

GPU_QUEUE = "gpu"  # tasks that need the engine run on workers next to a GPU
DEFAULT_QUEUE = "default"
GPU_TASKS = frozenset({"inferscale.encode_facts", "inferscale.extract_memories"})
REENCODE_EVERY_S = 600.0


def queue_for(task_name: str) -> str:
    return GPU_QUEUE if task_name in GPU_TASKS else DEFAULT_QUEUE


def create_celery() -> Celery:
    settings = get_settings()
    app = Celery(
        "inferscale",
        broker=settings.redis_url,
        backend=settings.redis_url,
        include=["worker.tasks"],
    )
    app.conf.update(
        task_default_queue=DEFAULT_QUEUE,
        task_routes={name: {"queue": GPU_QUEUE} for name in GPU_TASKS},
        task_acks_late=True,  # a job whose worker dies is redelivered; jobs are idempotent
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        # Redis redelivers a dead worker's unacknowledged task after this (kombu's default is an
        # hour: a job whose worker was killed sat that long).
        broker_transport_options={"visibility_timeout": settings.task_visibility_timeout_s},
        result_backend_transport_options={"visibility_timeout": settings.task_visibility_timeout_s},
        result_expires=3600,
        beat_schedule={
            "reencode-stale": {"task": "inferscale.reencode_stale", "schedule": REENCODE_EVERY_S},
            "relay-outbox": {"task": "inferscale.relay_outbox", "schedule": RELAY_EVERY_S},
        },
    )
    return app


celery_app = create_celery()
