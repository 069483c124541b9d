"""Encoding and ingestion jobs through real Redis and a real Celery worker process (a client of
the session's runtime service), against the session's Postgres."""

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
from gpu_runtime.store.disk.compaction import segment_name
from gpu_runtime.types import EncodingConfig, FactKey, TenantId
from tests.support import TenantHandle, encoding_config, kv_disk

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
    return encoding_config()


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
    disk = kv_disk()
    typed, ids = TenantId(tenant.id), [m["id"] for m in created["results"]]
    keys = [FactKey.for_fact(typed, str(i), 1, _config()) for i in ids]
    assert all(disk.exists(k) for k in keys)
    places = [disk.locate(k) for k in keys]  # a rewrite appends a fact again: a new extent

    # The broker redelivers the same job: nothing is encoded or recorded twice.
    again = encode_facts.delay(tenant.id, ids, None).get(timeout=300)
    assert again == 0
    assert len(_encodings(tenant)) == 2
    assert [kv_disk().locate(k) for k in keys] == places


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
    disk = kv_disk()
    typed = TenantId(tenant.id)
    assert all(disk.exists(FactKey.for_fact(typed, str(i), 1, _config())) for i in fact_ids)
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
        fact_id, public_id = fact.id, str(fact.public_id)
    assert reencode_stale.delay().get(timeout=120) >= 1
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        rows = [r for r in _encodings(tenant) if r.fact_id == fact_id and r.status == "ready"]
        if rows:
            break
        time.sleep(1)
    else:
        raise AssertionError("the stale fact was not re-encoded")
    assert kv_disk().exists(FactKey.for_fact(typed, public_id, 1, _config()))


def test_a_torn_kv_extent_is_detected_never_served_and_reencoded(
    api: TestClient,
    make_tenant: Callable[[], TenantHandle],
    celery_worker_process: subprocess.Popen[bytes],
    runtime: Any,
) -> None:
    """Half of the durable copy of an encoded fact is lost (a torn write) after its KV left the
    memory tiers: the runtime finds it corrupt when it next reads it (checksum), discards it and
    never serves its bytes (the chat's answer is the healthy one); the scheduled re-encode
    writes it again."""
    from gpu_runtime.client import protocol as p
    from worker.tasks import reencode_stale

    tenant = make_tenant()
    typed = TenantId(tenant.id)
    fact = {"user_id": "u", "text": "The user's bike is a red Bianchi."}
    written = api.post("/v1/memories", headers=tenant.headers, json=fact)
    assert written.status_code == 201, written.text
    assert _wait_job(api, tenant, written.json()["job_id"])["status"] == "succeeded"
    fact_id = written.json()["results"][0]["id"]
    key = FactKey.for_fact(typed, str(fact_id), 1, _config())
    chat = {"model": "inferscale", "user": "u", "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "What bike do I have?"}],
            "memory": {"mode": "kv", "top_k": 1}}  # fmt: skip

    def ask() -> dict[str, Any]:
        response = api.post("/v1/chat/completions", json=chat, headers=tenant.headers)
        assert response.status_code == 200, response.text
        return dict(response.json())

    healthy = ask()
    assert healthy["inferscale"]["memories"] == [fact_id]
    wire = p.KeysRequest(tenant=tenant.id, keys=[p.key_model(key)])
    runtime.client.demote(p.DemoteRequest(tenant=tenant.id, keys=wire.keys, tier="disk"))
    assert runtime.client.placement(wire) == ["disk"]
    disk = kv_disk()
    extent = disk.locate(key)
    assert extent is not None
    segment = disk.log(typed).directory / segment_name(extent.segment)
    with open(segment, "r+b") as fh:  # the second half of its extent never reached the disk
        fh.seek(extent.offset + extent.length // 2)
        fh.write(bytes(extent.length - extent.length // 2))

    after = ask()  # reads the extent again: corrupt, discarded, its bytes never used
    assert after["choices"][0]["message"]["content"] == healthy["choices"][0]["message"]["content"]
    assert kv_disk().locate(key) is None
    assert runtime.client.contains(wire) == [False]
    assert reencode_stale.delay().get(timeout=120) >= 1  # the sweep finds the lost fact
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not kv_disk().exists(key):
        time.sleep(1)
    assert kv_disk().get(key) is not None, "the lost fact was not re-encoded"  # checksum ok
    assert ask()["choices"][0]["message"]["content"] == healthy["choices"][0]["message"]["content"]
