"""A task goes through the real Redis broker to a real Celery worker process and back."""

from __future__ import annotations

import subprocess
import uuid

import pytest

pytestmark = pytest.mark.broker


def test_ping_round_trip(celery_worker_process: subprocess.Popen[bytes]) -> None:
    from worker.tasks import ping

    token = uuid.uuid4().hex
    reply = ping.delay(token).get(timeout=30)
    assert reply["token"] == token
    assert reply["worker"]
