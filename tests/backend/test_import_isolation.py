"""The API and the Celery workers are clients of the runtime service: neither imports torch or
vLLM, not even while serving a chat or running an encoding job."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from tests.redis_dbs import flush, spare_redis_url
from tests.support import ADMIN_KEY

pytestmark = pytest.mark.engine

PROBE = textwrap.dedent(
    """
    import sys, uuid
    import backend.main, worker.celery_app, worker.tasks
    from fastapi.testclient import TestClient
    from backend.jobs.encoding import encode_facts

    admin = {"Authorization": "Bearer %(admin)s"}
    with TestClient(backend.main.create_app()) as http:
        tenant = http.post("/v1/tenants", json={"name": uuid.uuid4().hex[:12]}, headers=admin)
        key = tenant.json()["api_key"]
        auth = {"Authorization": "Bearer " + key}
        memory = http.post("/v1/memories", json={"user_id": "u", "text": "The user has a cat."},
                           headers=auth).json()["results"][0]
        assert encode_facts(tenant.json()["id"], [memory["id"]]) == 1  # the worker's job
        chat = http.post("/v1/chat/completions", headers=auth, json={
            "model": "inferscale", "user": "u", "max_tokens": 4, "memory": {"mode": "kv"},
            "messages": [{"role": "user", "content": "What pet do I have?"}]})
        assert chat.status_code == 200, chat.text
        assert chat.json()["inferscale"]["injected_tokens"] > 0, chat.json()
    print(",".join(m for m in ("torch", "vllm", "transformers") if m in sys.modules))
    """
)


def test_api_and_worker_serve_without_torch_or_vllm(api: Any) -> None:
    # The probe runs the worker's job itself: its broker is a Redis database no worker consumes,
    # so the session's Celery worker cannot encode the fact first (the job would find it done).
    broker = spare_redis_url(0)
    flush(broker)
    result = subprocess.run(
        [sys.executable, "-c", PROBE % {"admin": ADMIN_KEY}],
        capture_output=True, text=True, timeout=300, env={**os.environ, "REDIS_URL": broker},
    )  # fmt: skip
    flush(broker)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "", f"loaded: {result.stdout.strip()}"
