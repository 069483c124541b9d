"""Beat's heartbeat: each scheduler tick touches a file, and the compose healthcheck
(``python -m worker.beat --check``) fails once beat stops ticking."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from worker import beat

pytestmark = pytest.mark.unit


def test_a_tick_touches_the_heartbeat_and_the_check_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    heartbeat = tmp_path / "beat-heartbeat"
    monkeypatch.setenv(beat.HEARTBEAT_VAR, str(heartbeat))
    assert "has not ticked yet" in str(beat.check())
    from worker.celery_app import celery_app

    scheduler = beat.HeartbeatScheduler(app=celery_app,
                                        schedule_filename=str(tmp_path / "schedule"))  # fmt: skip
    # Nothing is due yet on a fresh schedule; were anything sent, it would reach the session's
    # broker and worker.
    monkeypatch.setattr(scheduler, "apply_async", lambda *a, **k: pytest.fail("a task was sent"))
    interval = scheduler.tick()
    assert 0 <= interval <= 15  # the relay is due every 15 s
    assert heartbeat.exists() and beat.check() is None
    stale = time.time() - beat.STALE_AFTER_S - 5
    os.utime(heartbeat, (stale, stale))
    assert "last ticked" in str(beat.check())
    env = {**os.environ, beat.HEARTBEAT_VAR: str(heartbeat)}
    probe = [sys.executable, "-m", "worker.beat", "--check"]
    assert subprocess.run(probe, env=env, capture_output=True).returncode == 1
    scheduler.tick()
    assert subprocess.run(probe, env=env, capture_output=True).returncode == 0
    scheduler.close()
