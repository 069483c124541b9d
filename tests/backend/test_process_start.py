"""A backend process that cannot start says why in one line on stderr and exits non-zero (2),
so compose's restart policy and its log show the reason, not a traceback or a clean exit."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

PLACEHOLDERS = {"INFERSCALE_ADMIN_KEY": "dev-admin-key", "INFERSCALE_KEY_PEPPER": "changeme",
                "INFERSCALE_SERVICE_TOKEN": "dev-service-token"}  # fmt: skip


def _start(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **PLACEHOLDERS, "INFERSCALE_ENV": "dev", **env}
    return subprocess.run([sys.executable, "-m", *args], env=full, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "cannot start" in line]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_the_api_refuses_placeholder_secrets_on_a_reachable_address() -> None:
    done = _start(["backend.cli", "api"], INFERSCALE_API_HOST="0.0.0.0")
    assert done.returncode == 2
    assert _one_line(done.stderr).startswith(
        "inferscale api: cannot start: refusing to listen on 0.0.0.0 with placeholder secrets "
        "(INFERSCALE_ADMIN_KEY, INFERSCALE_KEY_PEPPER, INFERSCALE_SERVICE_TOKEN)"
    )


@pytest.mark.parametrize("process", ["worker", "beat"])
def test_celery_processes_name_the_settings_they_refuse(process: str) -> None:
    done = _start(["worker", process], INFERSCALE_ENV="prod")
    assert done.returncode == 2
    assert f"inferscale {process}: cannot start: invalid settings" in _one_line(done.stderr)
    assert "placeholder secrets: INFERSCALE_ADMIN_KEY" in done.stderr


def test_migrations_against_an_unreachable_database() -> None:
    done = _start(["backend.cli", "migrate"],
                  DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:9/none")  # fmt: skip
    assert done.returncode == 2
    assert "inferscale migrate: cannot start:" in _one_line(done.stderr)
    assert "Connection refused" in done.stderr


@pytest.mark.parametrize("command", [["backend.cli", "api"], ["worker", "worker"]])
def test_an_index_on_a_gpu_this_host_lacks(command: list[str]) -> None:
    done = _start(command, INFERSCALE_INDEX_ON_GPU="1")  # CI's FAISS is the CPU build
    assert done.returncode == 2
    assert "INFERSCALE_INDEX_ON_GPU is set, but this FAISS build has no GPU" in _one_line(
        done.stderr
    )
