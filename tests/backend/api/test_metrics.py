"""The API's Prometheus exposition (``backend/api/metrics.py``): with several API processes
behind one port, every scrape shows all of their counts, whichever process answers it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from backend.api import metrics
from gpu_runtime.client.launch import free_port
from tests.processes import spawn, wait_healthy

COUNT = """
from backend.api.metrics import HTTP_REQUESTS
HTTP_REQUESTS.labels("GET", "/probe", "200").inc({n})
"""


def _healthz_total(exposition: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line.startswith("inferscale_http_requests_total{") and 'route="/healthz"' in line
    )


@pytest.mark.unit
def test_the_exposition_sums_every_process_that_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, metrics.MULTIPROCESS_DIR: str(tmp_path)}
    for n in (3, 4):  # two processes, as two uvicorn workers, one after the other
        subprocess.run([sys.executable, "-c", COUNT.format(n=n)], env=env, check=True, timeout=60)
    monkeypatch.setenv(metrics.MULTIPROCESS_DIR, str(tmp_path))

    text = metrics.render().decode()

    line = 'inferscale_http_requests_total{method="GET",route="/probe",status="200"} 7.0'
    assert line in text.splitlines()


@pytest.mark.db
def test_two_api_processes_answer_every_scrape_with_both_counts(
    migrated_database: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {**os.environ, "INFERSCALE_API_WORKERS": "2", "INFERSCALE_API_PORT": str(port)}
    env.pop(metrics.MULTIPROCESS_DIR, None)
    api = spawn(["inferscale.cli", "api"], env, tmp_path / "api.log")
    base = f"http://127.0.0.1:{port}"
    fresh = {"Connection": "close"}  # a new connection each time: either process may take it
    try:
        wait_healthy(base)
        before = _healthz_total(httpx.get(f"{base}/metrics", headers=fresh).text)
        for _ in range(40):
            assert httpx.get(f"{base}/healthz", headers=fresh).status_code == 200
        scrapes = [httpx.get(f"{base}/metrics", headers=fresh).text for _ in range(8)]
    finally:
        api.terminate()
        api.wait(timeout=60)
    assert {_healthz_total(s) for s in scrapes} == {before + 40}, (tmp_path / "api.log").read_text()
    probes = [line for line in scrapes[-1].splitlines()
              if line.startswith("inferscale_api_event_loop_lag_seconds_count")]  # fmt: skip
    assert probes and float(probes[0].rsplit(" ", 1)[1]) > 0  # each process's loop probe runs
