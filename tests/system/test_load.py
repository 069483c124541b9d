"""Load: 100 concurrent users chatting in kv mode through the API (its own uvicorn process, as
deployed) for two requests each, against the CPU stack: not one request fails. Latency,
requests/s and /healthz latency during the run are recorded (printed, and written to
``$INFERSCALE_LOAD_OUT`` if set); the goals on them are the serving benchmark's
(docs/benchmarks.md), not asserted here."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench.serve.serve import ServeBench, to_rows
from gpu_runtime.client.launch import RuntimeProcess, free_port
from tests.processes import api_args, spawn, wait_healthy
from tests.support import ADMIN_KEY, locomo_opening

pytestmark = pytest.mark.broker

USERS, PER_USER = 100, 2


def test_hundred_concurrent_kv_chats_all_succeed(
    migrated_database: str,
    runtime_server: RuntimeProcess,
    celery_worker_process: Any,
    tmp_path: Path,
) -> None:
    port = free_port()
    api = spawn(api_args(port), dict(os.environ), tmp_path / "api.log")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base)
        bench = ServeBench(base, ADMIN_KEY, max_tokens=4)
        bench.prepare(locomo_opening(tmp_path / "opening.json"), log=lambda _: None)
        (row,) = to_rows(asyncio.run(bench.run([USERS], [5], ["kv"], per_user=PER_USER)))
    finally:
        api.terminate()
        api.wait(timeout=60)
    record = {k: row[k] for k in ("users", "k", "mode", "requests", "failures", "errors",
                                  "requests_per_s", "client_ttft_ms", "healthz_ms")}  # fmt: skip
    print(json.dumps(record))
    if out := os.environ.get("INFERSCALE_LOAD_OUT"):
        Path(out).write_text(json.dumps(record, indent=1))
    assert row["requests"] == USERS * PER_USER
    assert row["failures"] == 0, row["errors"]
    assert row["healthz_ms"]["n"] > 0  # /healthz was probed throughout
