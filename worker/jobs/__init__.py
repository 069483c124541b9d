"""The work behind the Celery tasks, as plain functions taking ids (testable without Celery)."""
