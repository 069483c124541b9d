"""A delete leaves nothing behind on any layer: after DELETE of a memory, of a user's memories
or of a tenant returns, a marker string it contained is in no row of any Postgres table, the
index cannot find it, its KV is on no tier and in no file, and no chat can surface it (the
stack on real parts: Postgres, Redis, a Celery worker encoding through the runtime)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

from backend.db.session import get_engine
from gpu_runtime.client import protocol as p
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.types import FactKey, TenantId
from tests.support import ADMIN, SERVICE_TOKEN, TenantHandle, encoding_config, kv_disk

pytestmark = pytest.mark.broker


def _rows_mentioning(marker: str) -> dict[str, int]:
    """Every table, every column (a row cast to text), in the session's database."""
    engine = get_engine()
    found = {}
    with engine.connect() as conn:
        for table in inspect(engine).get_table_names():
            count = conn.execute(
                text(f'SELECT count(*) FROM "{table}" t WHERE t::text LIKE :m'),
                {"m": f"%{marker}%"},
            ).scalar_one()
            if count:
                found[table] = int(count)
    return found


def _remember(api: TestClient, tenant: TenantHandle, user: str, marker: str) -> dict[str, Any]:
    response = api.post(
        "/v1/memories",
        json={"user_id": user, "text": f"The user's vault phrase is {marker}.",
              "metadata": {"tag": marker}},
        headers={**tenant.headers, "Idempotency-Key": f"k-{marker}"},
    )  # fmt: skip
    assert response.status_code == 201, response.text
    memory: dict[str, Any] = response.json()["results"][0]
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        states = api.get(f"/v1/memories/{memory['id']}/encodings", headers=tenant.headers).json()
        if [s["status"] for s in states] == ["ready"]:
            return memory
        time.sleep(0.5)
    raise AssertionError("the memory was not encoded")


def _ask(api: TestClient, tenant: TenantHandle, user: str) -> dict[str, Any]:
    response = api.post("/v1/chat/completions", headers=tenant.headers, json={
        "model": "inferscale", "user": user, "max_tokens": 24, "temperature": 0,
        "messages": [{"role": "user", "content": "What is my vault phrase? Quote it exactly."}],
        "memory": {"mode": "kv", "top_k": 5}})  # fmt: skip
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _kv_everywhere(runtime: RuntimeProcess, tenant: TenantHandle, fact_id: str) -> list[Any]:
    """[tier in the pools, durable file exists] of the memory's current KV."""
    key = FactKey.for_fact(TenantId(tenant.id), str(fact_id), 1, encoding_config())
    client = RuntimeClient(runtime.url, SERVICE_TOKEN)
    request = p.KeysRequest(tenant=tenant.id, keys=[p.key_model(key)])
    return [client.placement(request)[0], kv_disk().exists(key)]


def _assert_gone(api: TestClient, tenant: TenantHandle, user: str, marker: str) -> None:
    assert _rows_mentioning(marker) == {}
    search = api.post("/v1/memories/search", json={"user_id": user, "query": marker},
                      headers=tenant.headers)  # fmt: skip
    assert search.status_code in (200, 401), search.text
    if search.status_code == 200:
        assert marker not in search.text


@pytest.mark.parametrize("scope", ["memory", "user"])
def test_deleted_memory_leaves_no_trace(
    api: TestClient,
    make_tenant: Callable[[], TenantHandle],
    celery_worker_process: Any,
    runtime_server: RuntimeProcess,
    scope: str,
) -> None:
    tenant, user, marker = make_tenant(), "deleting-user", f"zq{uuid.uuid4().hex[:12]}"
    memory = _remember(api, tenant, user, marker)
    served = _ask(api, tenant, user)  # its KV now in the pools, its blocks in the prefix cache
    assert memory["id"] in served["inferscale"]["memories"]
    assert _kv_everywhere(runtime_server, tenant, memory["id"])[1] is True
    assert _rows_mentioning(marker)  # the probe finds what is there

    if scope == "memory":
        deleted = api.delete(f"/v1/memories/{memory['id']}", headers=tenant.headers)
    else:
        deleted = api.delete("/v1/memories", params={"user_id": user}, headers=tenant.headers)
    assert deleted.status_code == 200, deleted.text

    _assert_gone(api, tenant, user, marker)
    assert _kv_everywhere(runtime_server, tenant, memory["id"]) == [None, False]
    after = _ask(api, tenant, user)
    nobody = _ask(api, tenant, "a-user-without-memories")  # injects the preamble only
    assert after["inferscale"]["memories"] == []
    assert after["inferscale"]["injected_tokens"] == nobody["inferscale"]["injected_tokens"]
    assert marker not in after["choices"][0]["message"]["content"]
    history = api.get(f"/v1/memories/{memory['id']}/history", headers=tenant.headers).json()
    assert [h["event"] for h in history] == ["ADD", "DELETE"]  # events stay, texts do not
    assert all(h["old_memory"] is None and h["new_memory"] is None for h in history)
    replay = api.post(  # the idempotent create's stored answer no longer quotes it
        "/v1/memories", json={"user_id": user, "text": f"The user's vault phrase is {marker}.",
                              "metadata": {"tag": marker}},
        headers={**tenant.headers, "Idempotency-Key": f"k-{marker}"},
    )  # fmt: skip
    assert replay.status_code == 201 and replay.json()["results"][0]["id"] != memory["id"]


def test_deleted_tenant_leaves_no_trace(
    api: TestClient,
    make_tenant: Callable[[], TenantHandle],
    celery_worker_process: Any,
    runtime_server: RuntimeProcess,
) -> None:
    tenant, user, marker = make_tenant(), "someone", f"zq{uuid.uuid4().hex[:12]}"
    memory = _remember(api, tenant, user, marker)
    _ask(api, tenant, user)
    assert api.delete(f"/v1/tenants/{tenant.id}", headers=ADMIN).status_code == 204
    assert _rows_mentioning(marker) == {}
    assert _rows_mentioning(tenant.id) == {}  # not a row of the tenant is left
    assert _kv_everywhere(runtime_server, tenant, memory["id"]) == [None, False]
    assert api.get("/v1/memories", params={"user_id": user},
                   headers=tenant.headers).status_code == 401  # fmt: skip


def test_deleted_conversation_leaves_no_trace(
    api: TestClient,
    make_tenant: Callable[[], TenantHandle],
    celery_worker_process: Any,
    runtime_server: RuntimeProcess,
) -> None:
    """A conversation imported with a marker in a turn and in the observation taken from it:
    after its DELETE the marker is in no row (turns, facts, the ingestion job's payload), the
    memory taken from it and its KV are gone, and a chat cannot surface it."""
    tenant, user, marker = make_tenant(), "talker", f"zq{uuid.uuid4().hex[:12]}"
    locomo = {
        "sample_id": "marker", "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "1:00 pm on 1 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": f"My vault phrase is {marker}."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "I will not tell anyone."}],
        "session_1_observation": {"Ann": [[f"Ann's vault phrase is {marker}.", "D1:1"]]},
        "qa": []}  # fmt: skip
    imported = api.post("/v1/conversations", json={"user_id": user, "locomo": locomo},
                        headers=tenant.headers)  # fmt: skip
    assert imported.status_code == 202, imported.text
    conversation = imported.json()
    deadline = time.monotonic() + 300
    memories: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        memories = api.get("/v1/memories", params={"user_id": user},
                           headers=tenant.headers).json()["items"]  # fmt: skip
        states = [
            s["status"]
            for m in memories
            for s in api.get(f"/v1/memories/{m['id']}/encodings", headers=tenant.headers).json()
        ]
        if memories and states and all(s == "ready" for s in states):
            break
        time.sleep(0.5)
    (memory,) = memories
    assert marker in memory["memory"]
    assert memory["id"] in _ask(api, tenant, user)["inferscale"]["memories"]
    assert set(_rows_mentioning(marker)) >= {"turns", "facts"}
    assert "jobs" not in _rows_mentioning(marker)  # the observation left the job once a fact

    deleted = api.delete(f"/v1/conversations/{conversation['id']}", headers=tenant.headers)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"deleted": 1}

    _assert_gone(api, tenant, user, marker)
    assert _kv_everywhere(runtime_server, tenant, memory["id"]) == [None, False]
    assert api.get(f"/v1/conversations/{conversation['id']}",
                   headers=tenant.headers).status_code == 404  # fmt: skip
    after = _ask(api, tenant, user)
    assert after["inferscale"]["memories"] == []
    assert marker not in after["choices"][0]["message"]["content"]
    again = api.delete(f"/v1/conversations/{conversation['id']}", headers=tenant.headers)
    assert again.status_code == 404


def test_deleted_entity_takes_its_pending_jobs_and_conversations(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    """Mem0's ``delete_users``: an ``infer=true`` add not yet run holds the messages in its job,
    and the user's imported conversation holds its turns; after DELETE of the user entity the
    marker is in no row and the job will add nothing. (No worker runs the job here: the broker
    is not told about it.)"""
    from dataclasses import replace

    from backend.core.locomo import ParsedConversation, TurnIn
    from backend.db.models import Job
    from backend.db.session import session_scope
    from backend.resources import process_resources
    from backend.services.conversations import ConversationService
    from backend.services.mem0 import Mem0Service, Scope

    tenant, user, marker = make_tenant(), "leaving-user", f"zq{uuid.uuid4().hex[:12]}"
    engine = api.app.state.resources.engine  # type: ignore[attr-defined]
    with session_scope() as session:
        ctx = replace(process_resources().tenant_context(session, TenantId(tenant.id), engine),
                      enqueue=lambda task, kwargs: None)  # fmt: skip
        job = Mem0Service(ctx).schedule_inference(
            Scope(user_id=user), {"messages": [{"role": "user", "content": f"Code {marker}."}]}
        )
        ConversationService(ctx).import_(
            user, ParsedConversation("talk", [TurnIn("Ann", f"My code is {marker}.")], [])
        )
        job_id = job.id
    assert set(_rows_mentioning(marker)) == {"jobs", "turns"}

    token = {"Authorization": f"Token {tenant.key}"}
    deleted = api.delete(f"/v2/entities/user/{user}/", headers=token)
    assert deleted.status_code == 200, deleted.text
    assert _rows_mentioning(marker) == {}
    with session_scope() as session:
        cancelled = session.get(Job, job_id)
        assert cancelled is not None and cancelled.payload["applied"] is True
        assert cancelled.status == "failed" and (cancelled.error or "").startswith("cancelled")
