"""A Celery worker SIGKILLed in the middle of an encoding job: Redis hands the unacknowledged
task to the next worker once its visibility timeout passes, and the rerun skips what the dead
worker had already encoded (the API, two worker processes one after the other, real Redis,
the session's Postgres and runtime)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.core.paths import locomo_dir
from gpu_runtime.client.launch import RuntimeProcess, free_port
from tests.processes import api_args, logs, spawn, wait_healthy, worker_args
from tests.redis_dbs import flush, spare_redis_url
from tests.support import ADMIN

pytestmark = [pytest.mark.broker, pytest.mark.db]

VISIBILITY_S = 10


@pytest.fixture
def env(migrated_database: str, runtime_server: RuntimeProcess) -> Iterator[dict[str, str]]:
    broker = spare_redis_url(2)  # this test's queues only
    flush(broker)
    yield {**os.environ, "REDIS_URL": broker,
           "INFERSCALE_TASK_VISIBILITY_TIMEOUT_S": str(VISIBILITY_S)}  # fmt: skip
    flush(broker)


def _first_sessions(sample: dict[str, Any], sessions: int) -> dict[str, Any]:
    """The conversation cut to its first ``sessions`` sessions (their turns, observations and
    the rest), so the encoding job has a few batches to be killed in, not a dozen."""

    def kept(key: str) -> bool:
        number = re.search(r"session_(\d+)", key)
        return number is None or int(number.group(1)) <= sessions

    return {key: value for key, value in sample.items() if kept(key)}


def _job(http: httpx.Client, job_id: str, auth: dict[str, str]) -> dict[str, Any]:
    job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", headers=auth).json()
    return job


def test_a_killed_workers_job_is_rerun_by_the_next_worker_without_redoing_work(
    env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    api = spawn(api_args(port), env, tmp_path / "api.log")
    first = spawn(worker_args(f"doomed-{port}"), env, tmp_path / "worker-1.log")
    second = None
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base)
        http = httpx.Client(base_url=base, timeout=60)
        created = http.post("/v1/tenants", json={"name": f"killed-{port}"}, headers=ADMIN)
        auth = {"Authorization": f"Bearer {created.json()['api_key']}"}
        sample = _first_sessions(json.loads((locomo_dir() / "conv-30.json").read_text()), 8)
        imported = http.post("/v1/conversations", headers=auth,
                             json={"user_id": "u", "locomo": sample})  # fmt: skip
        assert imported.status_code == 202, imported.text
        deadline = time.monotonic() + 300
        while (ingest := _job(http, imported.json()["job_id"], auth))["status"] != "succeeded":
            assert time.monotonic() < deadline and ingest["status"] != "failed", ingest
            time.sleep(0.5)
        encode_id = ingest["result"]["encode_job_id"]
        total = len(ingest["result"]["fact_ids"])

        # Kill the worker once it has encoded some batches but not all.
        deadline = time.monotonic() + 300
        while (job := _job(http, encode_id, auth))["progress_done"] < 32:
            assert time.monotonic() < deadline and job["status"] != "succeeded", job
            time.sleep(0.2)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        done_before = _job(http, encode_id, auth)["progress_done"]
        assert 0 < done_before < total

        second = spawn(worker_args(f"heir-{port}"), env, tmp_path / "worker-2.log")
        deadline = time.monotonic() + 600
        while (job := _job(http, encode_id, auth))["status"] != "succeeded":
            assert time.monotonic() < deadline and job["status"] != "failed", (job, logs(tmp_path))
            time.sleep(1)
        assert job["result"]["encoded"] <= total - done_before + 16  # at most one batch redone
        # Every fact ends with exactly one ready encoding of its current version.
        for fact_id in ingest["result"]["fact_ids"][:: max(1, total // 20)]:
            rows = http.get(f"/v1/memories/{fact_id}/encodings", headers=auth).json()
            assert [r["status"] for r in rows] == ["ready"], rows
    finally:
        for proc in (api, first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
