"""Two tenants with the same user id and the identical fact, both encoded by the worker: tenant
B gets nothing of A through any route (memories, history, encodings, search, chat, jobs,
conversations, Mem0's surface through its SDK), B's deletes touch only B's data, and tenant keys
are refused on admin routes.
The engine-level half (KV pools, disk store, prefix cache, the runtime's API) is
tests/gpu_runtime/test_tenant_isolation_engine.py and the pool's quota tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpu_runtime.types import FactKey, TenantId
from tests.support import TenantHandle, encoding_config, kv_disk

pytestmark = pytest.mark.broker

USER = "alice"


def _wait(api: TestClient, tenant: TenantHandle, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job: dict[str, Any] = api.get(f"/v1/jobs/{job_id}", headers=tenant.headers).json()
        if job["status"] in ("succeeded", "failed"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish")


def _seed(api: TestClient, tenant: TenantHandle, text: str) -> dict[str, Any]:
    """One memory and one imported conversation, their jobs finished."""
    added = api.post("/v1/memories", json={"user_id": USER, "text": text},
                     headers=tenant.headers).json()  # fmt: skip
    assert _wait(api, tenant, added["job_id"])["status"] == "succeeded"
    conversation = api.post("/v1/conversations", headers=tenant.headers, json={
        "user_id": USER, "turns": [{"speaker": "alice", "text": text}]}).json()  # fmt: skip
    assert _wait(api, tenant, conversation["job_id"])["status"] == "succeeded"
    return {"memory": added["results"][0]["id"], "job": added["job_id"],
            "conversation": conversation["id"], "import_job": conversation["job_id"]}  # fmt: skip


def test_tenant_b_gets_nothing_of_tenant_a(
    api: TestClient, make_tenant: Callable[[], TenantHandle], celery_worker_process: Any
) -> None:
    a, b = make_tenant(), make_tenant()
    text = f"The user's door code is {uuid.uuid4().hex[:8]}."
    mine, theirs = _seed(api, a, text), _seed(api, b, text)

    for path in (
        f"/v1/memories/{mine['memory']}",
        f"/v1/memories/{mine['memory']}/history",
        f"/v1/memories/{mine['memory']}/encodings",
        f"/v1/jobs/{mine['job']}",
        f"/v1/jobs/{mine['import_job']}",
        f"/v1/conversations/{mine['conversation']}",
    ):
        assert api.get(path, headers=b.headers).status_code == 404, path  # fmt: skip
    assert api.put(f"/v1/memories/{mine['memory']}", json={"text": "x"},
                   headers=b.headers).status_code == 404  # fmt: skip
    assert api.delete(f"/v1/memories/{mine['memory']}", headers=b.headers).status_code == 404

    listed = api.get("/v1/memories", params={"user_id": USER}, headers=b.headers).json()
    ids_b = {m["id"] for m in listed["items"]}
    assert mine["memory"] not in ids_b and theirs["memory"] in ids_b
    found = api.post("/v1/memories/search", json={"user_id": USER, "query": text, "top_k": 50},
                     headers=b.headers).json()["results"]  # fmt: skip
    assert {m["id"] for m in found} <= ids_b
    chat = api.post("/v1/chat/completions", headers=b.headers, json={
        "model": "inferscale", "user": USER, "max_tokens": 4,
        "messages": [{"role": "user", "content": "What is my door code?"}],
        "memory": {"mode": "kv", "top_k": 50}}).json()  # fmt: skip
    assert chat["inferscale"]["memories"] and set(chat["inferscale"]["memories"]) <= ids_b

    # B deletes everything of its alice: A's alice keeps her memory and its KV.
    assert (
        api.delete("/v1/memories", params={"user_id": USER}, headers=b.headers).status_code == 200
    )
    assert api.get(f"/v1/memories/{mine['memory']}", headers=a.headers).status_code == 200
    key = FactKey.for_fact(TenantId(a.id), mine["memory"], 1, encoding_config())
    assert kv_disk().exists(key)
    assert api.get("/v1/memories", params={"user_id": USER},
                   headers=a.headers).json()["total"] == len(ids_b)  # fmt: skip


def test_tenant_keys_are_refused_on_admin_routes(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    for method, path in (
        ("GET", "/v1/tenants"),
        ("POST", "/v1/tenants"),
        ("GET", f"/v1/tenants/{tenant.id}"),
        ("DELETE", f"/v1/tenants/{tenant.id}"),
        ("GET", f"/v1/tenants/{tenant.id}/keys"),
        ("POST", f"/v1/tenants/{tenant.id}/keys"),
        ("GET", "/v1/admin/overview"),
        ("GET", "/v1/admin/requests"),
        ("GET", "/v1/admin/replicas"),
    ):
        body = {"name": "x"} if (method, path) == ("POST", "/v1/tenants") else None
        response = api.request(method, path, json=body, headers=tenant.headers)
        assert response.status_code == 403, (method, path, response.text)  # fmt: skip


def test_tenant_b_gets_nothing_of_tenant_a_through_the_mem0_sdk(
    served_app: str, make_tenant: Callable[[], TenantHandle]
) -> None:
    """The same through Mem0's surface and its official SDK: one user id, agent id and fact in
    both tenants; B's every read, write, batch and reset touches only B's memories."""
    from mem0 import MemoryClient
    from mem0.exceptions import MemoryNotFoundError

    a, b = make_tenant(), make_tenant()
    sdk_a = MemoryClient(api_key=a.key, host=served_app)
    sdk_b = MemoryClient(api_key=b.key, host=served_app)
    text = f"The user's door code is {uuid.uuid4().hex[:8]}."
    scope = {"user_id": USER, "agent_id": "concierge"}
    mine = sdk_a.add(text, infer=False, **scope)["results"][0]["id"]
    theirs = sdk_b.add(text, infer=False, **scope)["results"][0]["id"]

    calls: list[Callable[[], Any]] = [
        lambda: sdk_b.get(mine), lambda: sdk_b.history(mine),
        lambda: sdk_b.update(mine, text="x"), lambda: sdk_b.delete(mine),
        lambda: sdk_b.batch_update([{"memory_id": mine, "text": "x"}]),
        lambda: sdk_b.batch_delete([{"memory_id": mine}]),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(MemoryNotFoundError):
            call()
    for filters in ({"user_id": USER}, {"agent_id": "concierge"}, {"user_id": "*"},
                    {"memory_ids": [mine, theirs]}):  # fmt: skip
        everything = {**filters} if "user_id" in filters else {"AND": [filters, {"user_id": "*"}]}
        listed = sdk_b.get_all(filters=everything)["results"]
        assert [m["id"] for m in listed] == [theirs], filters
        found = sdk_b.search(text, filters=everything, threshold=0.0)["results"]
        assert [m["id"] for m in found] == [theirs], filters
    assert {(e["type"], e["name"]) for e in sdk_b.users()["results"]} == {
        ("user", USER), ("agent", "concierge")}  # fmt: skip

    sdk_b.reset()
    assert sdk_b.get_all(filters={"user_id": "*"})["count"] == 0
    sdk_b.add(text, infer=False, **scope)
    sdk_b.delete_all(user_id="*")
    sdk_b.delete_all(agent_id="*")
    assert sdk_b.users()["results"] == []
    assert sdk_a.get(mine)["memory"] == text  # untouched
    assert [h["event"] for h in sdk_a.history(mine)] == ["ADD"]
    assert sdk_a.get_all(filters={"agent_id": "concierge"})["count"] == 1
