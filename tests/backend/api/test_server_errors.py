"""A bug's 500 keeps the connection usable, a database that is down is a 503 with a clear
message (the app served by uvicorn on a real socket; a real Postgres URL nothing listens on),
and one whose schema was never migrated is not ready and answers 503, not 500."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from backend.main import create_app
from gpu_runtime.client.launch import free_port
from tests.databases import REPO, create_database, drop_database
from tests.processes import api_args, served_in_thread, spawn, wait_healthy
from tests.support import ADMIN

pytestmark = pytest.mark.db


@pytest.fixture
def buggy_app_port(migrated_database: str) -> Iterator[int]:
    app = create_app()

    @app.get("/bug")
    def bug() -> None:
        raise RuntimeError("a bug, not bad input")

    with served_in_thread(app) as base:
        yield int(base.rsplit(":", 1)[1])


def _read_response(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))  # fmt: skip
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_500_answers_json_and_the_connection_serves_the_next_request(
    buggy_app_port: int,
) -> None:
    with socket.create_connection(("127.0.0.1", buggy_app_port), timeout=10) as conn:
        conn.sendall(b"GET /bug HTTP/1.1\r\nHost: t\r\n\r\n")
        first = _read_response(conn)
        assert first.startswith(b"HTTP/1.1 500"), first
        error = json.loads(first.partition(b"\r\n\r\n")[2])["error"]
        assert error["code"] == "internal_error" and "a bug" not in error["message"]
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")  # same connection
        second = _read_response(conn)
        assert second.startswith(b"HTTP/1.1 200"), second


@pytest.fixture
def app_without_database() -> Iterator[tuple[int, Path]]:
    """The API as its own process, its DATABASE_URL a port nothing listens on (and its log)."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing",
    }
    log = REPO / f".pytest-nodb-{port}.log"
    proc = spawn(api_args(port, "critical"), env, log)
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        yield port, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.unlink(missing_ok=True)


def test_postgres_down_is_a_503_with_a_clear_message(
    app_without_database: tuple[int, Path],
) -> None:
    port, log = app_without_database
    response = httpx.get(f"http://127.0.0.1:{port}/v1/tenants", headers=ADMIN, timeout=30)
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "database_unavailable" and "retry" in error["message"]
    # The operator's log says which of the two causes it was (here: no server at all).
    deadline = time.monotonic() + 10
    while "database unavailable (OperationalError)" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.1)


@pytest.fixture
def app_on_an_unmigrated_database() -> Iterator[int]:
    """The API as its own process on a real, empty database (``inferscale migrate`` not run)."""
    name = f"inferscale_unmigrated_{os.getpid()}"
    drop_database(name)
    port = free_port()
    env = {**os.environ, "DATABASE_URL": create_database(name)}
    log = REPO / f".pytest-unmigrated-{port}.log"
    proc = spawn(api_args(port, "critical"), env, log)
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.unlink(missing_ok=True)
        drop_database(name)


def test_an_unmigrated_schema_is_not_ready_and_a_503_not_a_500(
    app_on_an_unmigrated_database: int,
) -> None:
    base = f"http://127.0.0.1:{app_on_an_unmigrated_database}"
    ready = httpx.get(f"{base}/readyz", timeout=30)
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"] == "schema not migrated: run `inferscale migrate`"
    created = httpx.post(f"{base}/v1/tenants", headers=ADMIN, json={"name": "acme"}, timeout=30)
    assert created.status_code == 503, created.text
    assert created.json()["error"]["code"] == "database_schema_outdated"


def test_a_schema_behind_the_code_names_both_revisions(migrated_database: str) -> None:
    from sqlalchemy import create_engine, text

    from backend.db.schema import head_revision, schema_problem

    engine = create_engine(migrated_database)
    try:
        with engine.connect() as conn:
            assert schema_problem(conn) is None  # at head
            conn.execute(text("update alembic_version set version_num = 'an_older_one'"))
            try:
                problem = schema_problem(conn)
            finally:
                conn.rollback()  # the session's database stays at head
    finally:
        engine.dispose()
    assert problem == (
        f"schema at revision an_older_one, this version needs {head_revision()}: "
        "run `inferscale migrate`"
    )
