"""The worker's Celery application: the shared configuration (``backend.jobs.pipeline.broker``)
and the tasks of ``worker.tasks``."""

from __future__ import annotations

from backend.core.config import get_settings
from backend.jobs.pipeline.broker import make_celery

celery_app = make_celery(get_settings(), include=["worker.tasks"])
