"""Celery tasks: thin, named, take ids only; the work lives in plain functions."""

from __future__ import annotations

import socket

from worker.celery_app import celery_app


@celery_app.task(name="inferscale.ping")  # type: ignore[untyped-decorator]
def ping(token: str) -> dict[str, str]:
    """Health round trip: proves the broker delivers and a worker answers."""
    return {"token": token, "worker": socket.gethostname()}
