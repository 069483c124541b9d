"""Encoding and ingestion jobs through real Redis and a real Celery worker process (which runs
its own vLLM-CPU engine), against the session's Postgres."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from backend.core.paths import locomo_dir
from backend.db.models import Fact, FactEncoding
from backend.db.session import session_scope
from gpu_runtime.config import RuntimeSettings
from gpu_runtime.types import EncodingConfig, FactKey, TenantId
from tests.support import TenantHandle, kv_store

pytestmark = pytest.mark.broker

LOCOMO = locomo_dir() / "conv-30.json"


def _wait_job(
    api: TestClient, tenant: TenantHandle, job_id: str, timeout: float = 600
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/v1/jobs/{job_id}", headers=tenant.headers).json()
        if job["status"] in ("succeeded", "failed"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish in {timeout}s: {job}")


def _config() -> EncodingConfig:
    s = RuntimeSettings()
    return EncodingConfig(s.model_name, s.window_turns, s.encoding_version)


def _encodings(tenant: TenantHandle) -> list[FactEncoding]:
    with session_scope() as session:
        return list(
            session.scalars(
                select(FactEncoding).where(FactEncoding.tenant_id == uuid.UUID(tenant.id))
            )
        )


def test_encode_job_is_idempotent_on_redelivery(
    api: TestClient,
    make_tenant: Callable[[], TenantHandle],
    celery_worker_process: subprocess.Popen[bytes],
) -> None:
    from worker.tasks import encode_facts

    tenant = make_tenant()
    created = api.post(
        "/v1/memories",
        json={"user_id": "enc", "messages": [
            {"role": "user", "content": "I moved to Porto in March."},
            {"role": "user", "content": "My daughter Ana plays the cello."},
        ]},
        headers=tenant.headers,
    ).json()  # fmt: skip
    job = _wait_job(api, tenant, created["job_id"])
    assert job["status"] == "succeeded", job
    assert job["progress_done"] == job["progress_total"] == 2
    rows = _encodings(tenant)
    assert (
        len(rows) == 2 and {r.status for r in rows} == {"ready"} and all(r.nbytes > 0 for r in rows)
    )
    store = kv_store()
    typed, ids = TenantId(tenant.id), [m["id"] for m in created["results"]]
    keys = [FactKey.for_fact(typed, str(i), 1, _config()) for i in ids]
    assert store.contains_all(typed, keys)
    mtimes = [store.disk.path(k).stat().st_mtime_ns for k in keys]  # type: ignore[union-attr]

    # The broker redelivers the same job: nothing is encoded or recorded twice.
    again = encode_facts.delay(tenant.id, ids, None).get(timeout=300)
    assert again == 0
    assert len(_encodings(tenant)) == 2
    assert [store.disk.path(k).stat().st_mtime_ns for k in keys] == mtimes  # type: ignore[union-attr]


def test_locomo_conversation_imports_and_gets_encoded(
    api: TestClient,
    make_tenant: Callable[[], TenantHandle],
    celery_worker_process: subprocess.Popen[bytes],
) -> None:
    tenant = make_tenant()
    sample = json.loads(LOCOMO.read_text())
    response = api.post(
        "/v1/conversations",
        json={"user_id": "locomo", "locomo": sample},
        headers={**tenant.headers, "Idempotency-Key": "conv-30"},
    )
    assert response.status_code == 202, response.text
    body = response.json()
    turns = sum(
        len(v) for k, v in sample.items() if k.startswith("session_") and isinstance(v, list)
    )
    assert body["turns"] == turns
    ingest = _wait_job(api, tenant, body["job_id"])
    assert ingest["status"] == "succeeded", ingest
    fact_ids = ingest["result"]["fact_ids"]
    observations = sum(
        len(facts) for k, v in sample.items() if k.endswith("_observation") for facts in v.values()
    )
    assert 0 < len(fact_ids) <= observations

    # A repeated import with the same Idempotency-Key creates nothing new.
    replay = api.post(
        "/v1/conversations",
        json={"user_id": "locomo", "locomo": sample},
        headers={**tenant.headers, "Idempotency-Key": "conv-30"},
    )
    assert replay.json() == body

    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        rows = _encodings(tenant)
        if len(rows) == len(fact_ids) and all(r.status == "ready" for r in rows):
            break
        time.sleep(2)
    else:
        raise AssertionError(f"{sum(r.status == 'ready' for r in rows)}/{len(fact_ids)} encoded")
    with session_scope() as session:
        total = session.scalar(select(func.count()).where(Fact.tenant_id == uuid.UUID(tenant.id)))
    assert total == len(fact_ids)
    store = kv_store()
    typed = TenantId(tenant.id)
    assert store.contains_all(
        typed, [FactKey.for_fact(typed, str(i), 1, _config()) for i in fact_ids]
    )
    search = api.post(
        "/v1/memories/search",
        json={"user_id": "locomo", "query": sample["qa"][0]["question"], "top_k": 5},
        headers=tenant.headers,
    ).json()["results"]
    assert len(search) == 5


def test_beat_reencodes_facts_without_a_ready_encoding(
    api: TestClient,
    make_tenant: Callable[[], TenantHandle],
    celery_worker_process: subprocess.Popen[bytes],
) -> None:
    """A fact written without an encoding job (e.g. before a model or w change) is found by the
    scheduled re-encode and encoded by the worker."""
    import numpy as np

    from backend.repositories.memories import FactRepository, UserRepository
    from worker.tasks import reencode_stale

    tenant = make_tenant()
    typed = TenantId(tenant.id)
    with session_scope() as session:
        user = UserRepository(session, typed).get_or_create("stale")
        vector = np.zeros(384, dtype=np.float32)
        vector[0] = 1.0
        fact = FactRepository(session, typed).add(user, "The user's bike is red.", vector)
        fact_id = fact.id
    assert reencode_stale.delay().get(timeout=120) >= 1
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        rows = [r for r in _encodings(tenant) if r.fact_id == fact_id and r.status == "ready"]
        if rows:
            break
        time.sleep(1)
    else:
        raise AssertionError("the stale fact was not re-encoded")
    store = kv_store()
    assert store.contains_all(typed, [FactKey.for_fact(typed, str(fact_id), 1, _config())])
