"""Redis down: memory writes are still stored, and their encode jobs run once Redis is back
(the jobs outbox), with a real Redis server that is stopped and restarted, the API, a Celery
worker and beat as their own processes, the session's Postgres and runtime."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpu_runtime.client.launch import RuntimeProcess, free_port
from tests.processes import api_args, spawn, wait_healthy, worker_args
from tests.processes import logs as logs_of
from tests.support import ADMIN

pytestmark = [pytest.mark.broker, pytest.mark.db]


class RedisServer:
    """A private redis-server that the test can take down and bring back on one port."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        import redis

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None


@pytest.fixture
def stack(
    migrated_database: str, runtime_server: RuntimeProcess, tmp_path: Path
) -> Iterator[tuple[str, RedisServer, Path]]:
    redis_server = RedisServer(free_port())
    redis_server.start()
    port = free_port()
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{redis_server.port}/0"}
    procs = [
        spawn(api_args(port), env, tmp_path / "api.log"),
        spawn(worker_args(f"outbox-{port}"), env, tmp_path / "worker.log"),
        spawn(["celery", "-A", "worker.celery_app", "beat", "--loglevel=info",
               f"--schedule={tmp_path / 'beat-schedule'}"], env, tmp_path / "beat.log"),
    ]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base)
    try:
        yield base, redis_server, tmp_path
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        redis_server.stop()


def test_writes_while_redis_is_down_are_kept_and_encoded_when_it_returns(
    stack: tuple[str, RedisServer, Path],
) -> None:
    base, redis_server, logs = stack
    http = httpx.Client(base_url=base, timeout=60)
    created = http.post("/v1/tenants", json={"name": f"outbox-{free_port()}"}, headers=ADMIN)
    assert created.status_code == 201, created.text
    auth = {"Authorization": f"Bearer {created.json()['api_key']}"}

    redis_server.stop()
    fact = {"user_id": "u", "text": "The user's locker code is 4417."}
    written = http.post("/v1/memories", headers=auth, json=fact)
    assert written.status_code == 201, written.text  # stored although the broker is down
    job_id, memory_id = written.json()["job_id"], written.json()["results"][0]["id"]
    assert http.get(f"/v1/memories/{memory_id}", headers=auth).status_code == 200
    time.sleep(2)
    job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", headers=auth).json()
    assert job["status"] == "queued", job  # nothing could run it

    redis_server.start()  # beat's relay sends it; the worker encodes it
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        job = http.get(f"/v1/jobs/{job_id}", headers=auth).json()
        if job["status"] in ("succeeded", "failed"):
            break
        time.sleep(1)
    assert job["status"] == "succeeded", f"{job}\n{logs_of(logs)}"
    encodings = http.get(f"/v1/memories/{memory_id}/encodings", headers=auth).json()
    assert [e["status"] for e in encodings] == ["ready"], encodings
