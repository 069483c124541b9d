"""The official ``mem0ai`` SDK (pinned in pyproject's dev extra), sync and async clients, pointed
at the API with ``host=``: every method a Mem0 team uses works unchanged (real Postgres, MiniLM,
the runtime); ``infer=true`` runs the extraction job on a real Celery worker and the served model.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from mem0 import AsyncMemoryClient, MemoryClient
from mem0.exceptions import AuthenticationError, MemoryNotFoundError, ValidationError

from tests.support import TenantHandle

pytestmark = pytest.mark.db

FACTS = [
    "I live in Lisbon and work as a nurse.",
    "My dog is a beagle called Pepper.",
    "I am allergic to peanuts.",
    "My favourite band is Radiohead.",
    "I run every Tuesday morning.",
]


@pytest.fixture
def tenant(make_tenant: Callable[[], TenantHandle]) -> TenantHandle:
    return make_tenant()


@pytest.fixture
def client(served_app: str, tenant: TenantHandle) -> MemoryClient:
    return MemoryClient(api_key=tenant.key, host=served_app)


def _add(client: MemoryClient, text: str, **entities: Any) -> str:
    added = client.add(text, infer=False, **entities)
    assert added["status"] == "SUCCEEDED" and len(added["results"]) == 1, added
    memory_id: str = added["results"][0]["id"]
    return memory_id


def test_constructor_pings_and_refuses_a_bad_key(served_app: str, tenant: TenantHandle) -> None:
    client = MemoryClient(api_key=tenant.key, host=served_app)
    assert client.org_id == tenant.id and client.project_id == tenant.id
    with pytest.raises(ValueError, match="invalid or revoked API key"):
        MemoryClient(api_key="isk_not-a-key", host=served_app)


def test_add_get_update_history_delete(client: MemoryClient) -> None:
    added = client.add(
        [{"role": "user", "content": FACTS[0]}, {"role": "assistant", "content": "Noted!"}],
        user_id="alice",
        agent_id="concierge",
        run_id="r1",
        metadata={"source": "chat"},
        infer=False,
    )
    assert [r["event"] for r in added["results"]] == ["ADD", "ADD"]
    memory_id = added["results"][0]["id"]
    got = client.get(memory_id)
    assert got["memory"] == FACTS[0] and got["user_id"] == "alice"
    assert (got["agent_id"], got["run_id"], got["app_id"]) == ("concierge", "r1", None)
    assert got["metadata"] == {"source": "chat"} and isinstance(got["categories"], list)

    updated = client.update(memory_id, text="I live in Porto and work as a nurse.")
    assert updated["memory"] == "I live in Porto and work as a nurse."
    client.update(memory_id, metadata={"source": "form"})
    assert client.get(memory_id)["metadata"] == {"source": "form"}
    history = client.history(memory_id)
    assert [h["event"] for h in history] == ["ADD", "UPDATE"]
    assert history[1]["old_memory"] == FACTS[0] and history[1]["user_id"] == "alice"

    assert client.delete(memory_id)["message"]
    with pytest.raises(MemoryNotFoundError):
        client.get(memory_id)
    assert [h["event"] for h in client.history(memory_id)] == ["ADD", "UPDATE", "DELETE"]


def test_get_all_filters_and_pages(client: MemoryClient) -> None:
    ids = [_add(client, text, user_id="bob") for text in FACTS]
    _add(client, "The agent speaks Portuguese.", agent_id="helper")
    _add(client, "Tagged memory.", user_id="bob", metadata={"topic": "food"})
    everything = client.get_all(filters={"user_id": "bob"})
    assert everything["count"] == 6 and everything["next"] is None
    first = client.get_all(filters={"user_id": "bob"}, page=1, page_size=4)
    second = client.get_all(filters={"user_id": "bob"}, page=2, page_size=4)
    assert first["count"] == 6 and len(first["results"]) == 4 and first["next"]
    assert len(second["results"]) == 2 and second["previous"] and second["next"] is None
    paged = {m["id"] for m in first["results"] + second["results"]}
    assert paged == {m["id"] for m in everything["results"]} and set(ids) <= paged

    by_metadata = client.get_all(
        filters={"AND": [{"user_id": "bob"}, {"metadata": {"topic": "food"}}]}
    )
    assert [m["memory"] for m in by_metadata["results"]] == ["Tagged memory."]
    either = client.get_all(filters={"OR": [{"user_id": "bob"}, {"agent_id": "helper"}]})
    assert either["count"] == 7
    agent = client.get_all(filters={"agent_id": {"in": ["helper", "nobody"]}})
    assert [m["memory"] for m in agent["results"]] == ["The agent speaks Portuguese."]
    assert agent["results"][0]["user_id"] is None
    today = time.strftime("%Y-%m-%d", time.gmtime())
    dated = client.get_all(
        filters={"AND": [{"user_id": "bob"}, {"created_at": {"gte": today, "lte": today}}]}
    )
    assert dated["count"] == 6
    before = client.get_all(
        filters={"AND": [{"user_id": "bob"}, {"created_at": {"lt": "2020-01-01"}}]}
    )
    assert before["count"] == 0
    picked = client.get_all(filters={"AND": [{"user_id": "bob"}, {"memory_ids": ids[:2]}]})
    assert {m["id"] for m in picked["results"]} == set(ids[:2])
    with pytest.raises(ValidationError, match="unknown filter key"):
        client.get_all(filters={"user_id": "bob", "colour": "red"})
    with pytest.raises(ValidationError, match="at least one entity"):
        client.get_all(filters={"metadata": {"topic": "food"}})


def test_search_with_filters_and_threshold(client: MemoryClient) -> None:
    for text in FACTS:
        _add(client, text, user_id="carol")
    _add(client, "My dog is a poodle called Rex.", user_id="dave")
    found = client.search("What breed is my dog?", filters={"user_id": "carol"}, top_k=3)
    results = found["results"]
    assert results[0]["memory"] == FACTS[1] and len(results) <= 3
    assert results[0]["score"] >= results[-1]["score"] and 0 < results[0]["score"] <= 1
    both = client.search(
        "What breed is my dog?", top_k=2, filters={"user_id": {"in": ["carol", "dave"]}}
    )["results"]
    assert {r["memory"] for r in both} == {FACTS[1], "My dog is a poodle called Rex."}
    strict = client.search(
        "What breed is my dog?", filters={"user_id": "carol"}, threshold=results[0]["score"] - 1e-4
    )["results"]
    assert [r["memory"] for r in strict] == [FACTS[1]]
    assert client.search("dog", filters={"user_id": "nobody"})["results"] == []


def test_delete_all_users_batches_and_reset(client: MemoryClient) -> None:
    kept = [_add(client, text, user_id="erin") for text in FACTS[:3]]
    _add(client, FACTS[3], user_id="frank")
    _add(client, FACTS[4], agent_id="bot")
    users = client.users()
    names = {(e["type"], e["name"]): e["total_memories"] for e in users["results"]}
    assert names == {("user", "erin"): 3, ("user", "frank"): 1, ("agent", "bot"): 1}
    assert users["total_users"] == 2 and users["total_agents"] == 1

    assert client.batch_update(
        [
            {"memory_id": kept[0], "text": "I live in Faro."},
            {"memory_id": kept[1], "metadata": {"k": "v"}},
        ]
    )["message"]
    assert client.get(kept[0])["memory"] == "I live in Faro."
    assert client.get(kept[1])["metadata"] == {"k": "v"}
    with pytest.raises(MemoryNotFoundError):  # all or nothing
        client.batch_update(
            [
                {"memory_id": kept[2], "text": "changed"},
                {"memory_id": str(uuid.uuid4()), "text": "x"},
            ]
        )
    assert client.get(kept[2])["memory"] == FACTS[2]
    assert client.batch_delete([{"memory_id": kept[0]}, {"memory_id": kept[1]}])["message"]
    with pytest.raises(MemoryNotFoundError):
        client.get(kept[0])

    client.delete_all(user_id="frank")
    assert client.get_all(filters={"user_id": "frank"})["count"] == 0
    assert client.get_all(filters={"user_id": "erin"})["count"] == 1
    client.delete_users(agent_id="bot")
    assert client.get_all(filters={"agent_id": "bot"})["count"] == 0
    client.reset()
    assert client.users()["results"] == []
    assert client.get_all(filters={"user_id": "*"})["count"] == 0


def test_error_classes(served_app: str, client: MemoryClient) -> None:
    with pytest.raises(MemoryNotFoundError):
        client.get(str(uuid.uuid4()))
    with pytest.raises(ValidationError):
        client.get("not-a-memory-id")
    with pytest.raises(ValidationError, match="NUL"):
        client.add("a\x00b", user_id="u", infer=False)
    with pytest.raises(ValidationError, match="at least one of user_id"):
        client.add("no scope", infer=False)
    memory_id = _add(client, "Something.", user_id="u")
    with pytest.raises(ValidationError, match="NUL"):
        client.update(memory_id, text="x\x00y")
    client.client.headers["Authorization"] = "Token isk_revoked"
    with pytest.raises(AuthenticationError):
        client.get(memory_id)


def _wait_event(base: str, key: str, event_id: str, timeout_s: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.get(
            f"{base}/v1/event/{event_id}/", headers={"Authorization": f"Token {key}"}
        )
        body: dict[str, Any] = response.json()
        if body["status"] in ("SUCCEEDED", "FAILED"):
            return body
        time.sleep(1)
    raise AssertionError(f"event {event_id} did not finish")


@pytest.mark.broker
@pytest.mark.engine
def test_infer_true_extracts_and_reconciles_through_the_model(
    served_app: str, tenant: TenantHandle, client: MemoryClient, celery_worker_process: Any
) -> None:
    conversation = [
        {"role": "user", "content": "Hi! My name is Gina and I live in Berlin. I love jazz."},
        {"role": "assistant", "content": "Nice to meet you, Gina!"},
    ]
    queued = client.add(conversation, user_id="gina")
    assert queued["status"] == "PENDING" and queued["results"] == [] and queued["event_id"]
    event = _wait_event(served_app, tenant.key, queued["event_id"])
    assert event["status"] == "SUCCEEDED", event
    added = event["results"]  # the served model's facts: whatever they say, they parsed
    assert added and all(r["event"] == "ADD" and r["data"]["memory"] for r in added)
    memories = client.get_all(filters={"user_id": "gina"})["results"]
    assert {m["id"] for m in memories} == {r["id"] for r in added}
    for result in added:
        assert [h["event"] for h in client.history(result["id"])] == ["ADD"]

    # A second conversation is reconciled with those memories: every decision is applied and
    # in the history of the memory it names.
    second = client.add(
        [{"role": "user", "content": "I moved from Berlin to Hamburg."}], user_id="gina"
    )
    event = _wait_event(served_app, tenant.key, second["event_id"])
    assert event["status"] == "SUCCEEDED", event
    for result in event["results"]:
        assert result["event"] in ("ADD", "UPDATE", "DELETE", "NONE")
        assert client.history(result["id"])[-1]["event"] == result["event"]
    # The job keeps its results only: the conversation it was given is gone from the row.
    from backend.db.models import Job
    from backend.db.session import session_scope

    with session_scope() as session:
        job = session.get(Job, uuid.UUID(second["event_id"]))
        assert job is not None and "request" not in job.payload and job.payload["applied"]


def test_async_client(served_app: str, tenant: TenantHandle) -> None:
    async def run() -> None:
        client = AsyncMemoryClient(api_key=tenant.key, host=served_app)
        added = await client.add(FACTS[1], user_id="hank", infer=False)
        memory_id = added["results"][0]["id"]
        assert (await client.get(memory_id))["memory"] == FACTS[1]
        found = await client.search("my dog", filters={"user_id": "hank"})
        assert found["results"][0]["id"] == memory_id
        page = await client.get_all(filters={"user_id": "hank"}, page=1, page_size=10)
        assert page["count"] == 1
        await client.update(memory_id, text="My dog is called Pepper.")
        assert [h["event"] for h in await client.history(memory_id)] == ["ADD", "UPDATE"]
        assert (await client.users())["results"][0]["name"] == "hank"
        await client.delete(memory_id)
        with pytest.raises(MemoryNotFoundError):
            await client.get(memory_id)
        await client.async_client.aclose()

    asyncio.run(run())
