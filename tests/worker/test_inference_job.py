"""Mem0's ``infer=true`` job without Celery: the decisions applied to real memories (each in
the memory's history), and the whole job (the served model under JSON schemas) applied exactly
once however often it is delivered."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.db.models import Job
from backend.db.session import session_scope
from backend.jobs.extraction import extract_memories
from backend.repositories.memories import FactRepository
from backend.resources import process_resources
from backend.services import inference as inf
from backend.services.mem0 import Scope
from gpu_runtime.types import TenantId
from tests.support import TenantHandle

pytestmark = pytest.mark.db


def _token(tenant: TenantHandle) -> dict[str, str]:
    return {"Authorization": f"Token {tenant.key}"}


def _add(api: TestClient, tenant: TenantHandle, text: str) -> str:
    body = {"messages": [{"role": "user", "content": text}], "user_id": "ivy", "infer": False}
    response = api.post("/v3/memories/add/", json=body, headers=_token(tenant))
    assert response.status_code == 200, response.text
    memory_id: str = response.json()["results"][0]["id"]
    return memory_id


def test_decisions_are_applied_and_each_is_in_history(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    ids = [_add(api, tenant, t) for t in ("Lives in Berlin.", "Owns a bike.", "Likes jazz.")]
    engine = api.app.state.resources.engine  # type: ignore[attr-defined]
    typed = TenantId(tenant.id)
    decisions = [
        inf.Decision("UPDATE", "Lives in Hamburg.", 0),
        inf.Decision("DELETE", "", 1),
        inf.Decision("NONE", "", 2),
        inf.Decision("DELETE", "", 2),  # a second decision on one memory: the first stands
        inf.Decision("ADD", "Has a cat.", None),
    ]
    with session_scope() as session:
        facts = FactRepository(session, typed)
        targets = [facts.get(uuid.UUID(i)) for i in ids]
        ctx = process_resources().tenant_context(session, typed, engine)
        results = inf.apply(
            ctx,
            Scope(user_id="ivy"),
            {"via": "test"},
            decisions,
            targets,
            {"Has a cat.": "hobbies"},
        )
    assert [r["event"] for r in results] == ["UPDATE", "DELETE", "NONE", "ADD"]
    assert results[0]["data"] == {
        "memory": "Lives in Hamburg.",
        "previous_memory": "Lives in Berlin.",
    }

    def history(memory_id: str) -> list[str]:
        got = api.get(f"/v1/memories/{memory_id}/history/", headers=_token(tenant)).json()
        return [h["event"] for h in got]

    assert history(ids[0]) == ["ADD", "UPDATE"]
    assert history(ids[1]) == ["ADD", "DELETE"]
    assert history(ids[2]) == ["ADD", "NONE"]
    added = api.get(f"/v1/memories/{results[3]['id']}/", headers=_token(tenant)).json()
    assert added["memory"] == "Has a cat." and added["categories"] == ["hobbies"]
    assert added["metadata"] == {"via": "test"} and added["user_id"] == "ivy"


def _settled(api: TestClient, tenant: TenantHandle, job_id: str) -> dict[str, Any]:
    """The job's event once no delivery is still working on it (the worker may be)."""
    deadline = time.monotonic() + 180
    while True:
        event: dict[str, Any] = api.get(f"/v1/event/{job_id}/", headers=_token(tenant)).json()
        if event["status"] not in ("PENDING", "RUNNING") or time.monotonic() > deadline:
            return event
        time.sleep(0.5)


@pytest.mark.engine
def test_the_job_is_applied_once_however_often_it_is_delivered(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    engine: Any = api.app.state.resources.engine  # type: ignore[attr-defined]
    body = {
        "user_id": "jo",
        "messages": [
            {"role": "user", "content": "I am Jo, a carpenter from Oslo, and I play the cello."}
        ],
    }
    queued = api.post("/v3/memories/add/", json=body, headers=_token(tenant)).json()
    job_id = queued["event_id"]
    # The add also queued the job to Celery: when the session's worker is up it runs the same
    # job at the same time as this inline delivery, and exactly one of the two applies it.
    first = extract_memories(tenant.id, job_id, engine=engine)  # the worker's job, inline
    event = _settled(api, tenant, job_id)
    assert event["status"] == "SUCCEEDED", event
    applied = {r["id"] for r in event["results"]}
    assert applied, "the model extracted no fact from the conversation"
    assert first in (0, len(event["results"]))  # 0: the worker's delivery applied it first
    listed = api.post("/v3/memories/", json={"filters": {"user_id": "jo"}}, headers=_token(tenant))
    before = {m["id"]: m["memory"] for m in listed.json()["results"]}
    assert set(before) == applied
    assert extract_memories(tenant.id, job_id, engine=engine) == 0  # redelivered: nothing new
    listed = api.post("/v3/memories/", json={"filters": {"user_id": "jo"}}, headers=_token(tenant))
    assert {m["id"]: m["memory"] for m in listed.json()["results"]} == before
    assert _settled(api, tenant, job_id)["status"] == "SUCCEEDED"
    with session_scope() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None and "request" not in job.payload  # the conversation is gone
    # Another tenant's key cannot run or read it.
    other = make_tenant()
    assert extract_memories(other.id, job_id, engine=engine) == 0
    assert api.get(f"/v1/event/{job_id}/", headers=_token(other)).status_code == 404


@pytest.mark.engine
def test_a_job_whose_model_extracts_nothing_says_so(
    api: TestClient, make_tenant: Callable[[], TenantHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The served model's answer is stood in for by an empty extraction (what SmolLM2 gave for
    "I moved to Porto last spring..."): the job succeeds, and its event and job say why
    nothing was added. The job is written as the add route writes it, but run inline here and
    never sent to the broker (a Celery worker of the session would run it with the real
    model)."""
    import dataclasses

    from backend.jobs import extraction
    from backend.services.mem0 import Mem0Service

    tenant = make_tenant()
    typed = TenantId(tenant.id)
    engine: Any = api.app.state.resources.engine  # type: ignore[attr-defined]
    request: dict[str, Any] = {
        "messages": [{"role": "user", "content": "Nothing to note."}], "metadata": {},
        "custom_instructions": None, "agent_custom_instructions": None,
        "includes": None, "excludes": None, "custom_categories": [],
    }  # fmt: skip
    with session_scope() as session:
        ctx = process_resources().tenant_context(session, typed, engine)
        inline = dataclasses.replace(ctx, enqueue=lambda task, kwargs: None)
        job_id = str(Mem0Service(inline).schedule_inference(Scope(user_id="kim"), request).id)
    monkeypatch.setattr(extraction, "_generate", lambda *args: '{"facts": []}')
    assert extract_memories(tenant.id, job_id, engine=engine) == 0
    event = _settled(api, tenant, job_id)
    assert event["status"] == "SUCCEEDED" and event["results"] == []
    assert event["message"] == extraction.NOTHING_EXTRACTED
    job = api.get(f"/v1/jobs/{job_id}", headers=tenant.headers).json()
    assert job["result"]["message"] == extraction.NOTHING_EXTRACTED
