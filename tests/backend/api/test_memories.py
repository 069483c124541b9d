"""Memory CRUD, history, search and tenant isolation through the API (real Postgres, FAISS,
MiniLM embeddings, the real KV store)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
import torch
from fastapi.testclient import TestClient

from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId
from tests.support import TenantHandle, encoding_config, kv_disk

pytestmark = pytest.mark.db

DISTRACTORS = [
    "Melanie painted a lake sunrise last year.",
    "Caroline is studying to become a counselor.",
    "The user's favourite food is ramen.",
    "The user goes running every Tuesday.",
    "The user's sister lives in Toronto.",
]


def _add(api: TestClient, tenant: TenantHandle, user: str, text: str) -> dict[str, object]:
    response = api.post(
        "/v1/memories", json={"user_id": user, "text": text}, headers=tenant.headers
    )
    assert response.status_code == 201, response.text
    result: dict[str, object] = response.json()["results"][0]
    return result


def test_crud_and_history(api: TestClient, make_tenant: Callable[[], TenantHandle]) -> None:
    tenant, user = make_tenant(), f"u-{uuid.uuid4().hex[:6]}"
    created = api.post(
        "/v1/memories",
        json={
            "user_id": user,
            "messages": [
                {"role": "user", "content": "I adopted a cat named Miso."},
                {"role": "assistant", "content": "Congratulations on adopting Miso!"},
            ],
            "metadata": {"source": "chat"},
        },
        headers=tenant.headers,
    )
    assert created.status_code == 201
    body = created.json()
    assert len(body["results"]) == 2 and body["job_id"]
    memory = body["results"][0]
    assert memory["memory"] == "I adopted a cat named Miso." and memory["version"] == 1
    assert uuid.UUID(memory["id"]).version == 4  # random: says nothing of other memories

    got = api.get(f"/v1/memories/{memory['id']}", headers=tenant.headers).json()
    assert got["metadata"] == {"source": "chat"} and got["user_id"] == user
    listed = api.get("/v1/memories", params={"user_id": user, "limit": 1}, headers=tenant.headers)
    assert listed.json()["total"] == 2 and len(listed.json()["items"]) == 1

    updated = api.put(
        f"/v1/memories/{memory['id']}", json={"text": "I adopted two cats."}, headers=tenant.headers
    ).json()
    assert updated["version"] == 2 and updated["memory"] == "I adopted two cats."
    history = api.get(f"/v1/memories/{memory['id']}/history", headers=tenant.headers).json()
    assert [h["event"] for h in history] == ["ADD", "UPDATE"]
    assert history[1]["old_memory"] == "I adopted a cat named Miso."
    assert history[1]["new_memory"] == "I adopted two cats."

    assert api.delete(f"/v1/memories/{memory['id']}", headers=tenant.headers).json() == {
        "deleted": 1
    }
    assert api.get(f"/v1/memories/{memory['id']}", headers=tenant.headers).status_code == 404
    history = api.get(f"/v1/memories/{memory['id']}/history", headers=tenant.headers).json()
    assert [h["event"] for h in history] == ["ADD", "UPDATE", "DELETE"]
    # A deleted memory's history keeps its events, not its texts (tests/system/test_deletion.py).
    assert all(h["old_memory"] is None and h["new_memory"] is None for h in history)

    assert api.delete("/v1/memories", params={"user_id": user}, headers=tenant.headers).json() == {
        "deleted": 1
    }
    assert (
        api.get("/v1/memories", params={"user_id": user}, headers=tenant.headers).json()["total"]
        == 0
    )


def test_planted_fact_ranks_first(api: TestClient, make_tenant: Callable[[], TenantHandle]) -> None:
    tenant, user = make_tenant(), "searcher"
    for text in DISTRACTORS:
        _add(api, tenant, user, text)
    planted = _add(api, tenant, user, "The user's dog is a beagle called Pepper.")
    results = api.post(
        "/v1/memories/search",
        json={"user_id": user, "query": "What breed is my dog and what is it called?", "top_k": 3},
        headers=tenant.headers,
    ).json()["results"]
    assert results[0]["id"] == planted["id"]
    assert results[0]["score"] > results[1]["score"]


def test_other_tenant_sees_nothing(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    a, b, user = make_tenant(), make_tenant(), "shared-name"
    secret = _add(api, a, user, "The user's safe combination is 31-7-22.")
    path = f"/v1/memories/{secret['id']}"
    assert api.get(path, headers=b.headers).status_code == 404  # 404, not 403: nothing leaks
    assert api.put(path, json={"text": "x"}, headers=b.headers).status_code == 404
    assert api.delete(path, headers=b.headers).status_code == 404
    assert api.get(path + "/history", headers=b.headers).status_code == 404
    assert api.get("/v1/memories", params={"user_id": user}, headers=b.headers).json()["total"] == 0
    search = api.post(
        "/v1/memories/search",
        json={"user_id": user, "query": "safe combination"},
        headers=b.headers,
    )
    assert search.json()["results"] == []
    assert api.delete("/v1/memories", params={"user_id": user}, headers=b.headers).json() == {
        "deleted": 0
    }
    assert api.get(path, headers=a.headers).status_code == 200  # untouched


def test_deleted_fact_vanishes_from_search_and_kv_store(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant, user = make_tenant(), "deleter"
    for text in DISTRACTORS[:3]:
        _add(api, tenant, user, text)
    doomed = _add(api, tenant, user, "The user's locker code is 4417.")
    # Its KV, as an encoding job leaves it in the runtime's durable store.
    disk = kv_disk()
    typed = TenantId(tenant.id)
    key = FactKey.for_fact(typed, str(doomed["id"]), 1, encoding_config())
    disk.put(key, FactKV.build(torch.ones(2, 3, 1, 4), torch.ones(2, 3, 1, 4), torch.arange(3)))
    assert disk.exists(key)

    query = {"user_id": user, "query": "What is my locker code?", "top_k": 5}
    before = api.post("/v1/memories/search", json=query, headers=tenant.headers).json()["results"]
    assert before[0]["id"] == doomed["id"]
    assert api.delete(f"/v1/memories/{doomed['id']}", headers=tenant.headers).status_code == 200
    after = api.post("/v1/memories/search", json=query, headers=tenant.headers).json()["results"]
    assert doomed["id"] not in {r["id"] for r in after}
    assert not disk.exists(key)  # the runtime purged it before the delete returned


def test_idempotency_key_prevents_duplicate_memories(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    headers = {**tenant.headers, "Idempotency-Key": "add-once"}
    body = {"user_id": "idem", "text": "The user is allergic to peanuts."}
    first = api.post("/v1/memories", json=body, headers=headers)
    second = api.post("/v1/memories", json=body, headers=headers)
    assert first.json() == second.json()
    assert (
        api.get("/v1/memories", params={"user_id": "idem"}, headers=tenant.headers).json()["total"]
        == 1
    )


@pytest.mark.parametrize(
    "body",
    [
        {"user_id": "u"},
        {"user_id": "u", "text": "a", "messages": [{"role": "user", "content": "b"}]},
        {"user_id": "", "text": "a"},
        {"user_id": "u", "messages": [{"role": "robot", "content": "b"}]},
        {"user_id": "u", "messages": [{"role": "system", "content": "only instructions"}]},
    ],
)
def test_bad_memory_input_is_422(
    api: TestClient, make_tenant: Callable[[], TenantHandle], body: dict[str, object]
) -> None:
    response = api.post("/v1/memories", json=body, headers=make_tenant().headers)
    assert response.status_code == 422
    assert response.json()["error"]["message"]


def test_an_evicted_users_index_is_rebuilt_on_its_next_search(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    """With room for one user's index, two users' searches evict each other's: every search
    still finds the right fact, rebuilt from Postgres, and changes made while a user's index
    was out are in it."""
    from backend.retrieval.index import FactIndex

    resources = api.app.state.resources  # type: ignore[attr-defined]
    bounded = FactIndex(384, use_gpu=False, max_bytes=2_000)  # fits one user of one fact
    saved, resources.index = resources.index, bounded
    try:
        tenant = make_tenant()
        pepper = _add(api, tenant, "ann", "The user's dog is a beagle called Pepper.")
        _add(api, tenant, "bo", "The user's cat is a tabby called Miso.")

        def top(user: str, query: str) -> str:
            results = api.post(
                "/v1/memories/search",
                headers=tenant.headers,
                json={"user_id": user, "query": query, "top_k": 1},
            ).json()
            return str(results["results"][0]["memory"])  # fmt: skip

        for _ in range(2):
            assert "Pepper" in top("ann", "what is my dog called?")
            assert "Miso" in top("bo", "what is my cat called?")
        assert bounded.stats()["evictions"] >= 3
        api.put(
            f"/v1/memories/{pepper['id']}",
            json={"text": "The user's dog is called Rex."},
            headers=tenant.headers,
        )  # fmt: skip (ann's index is out: changed in Postgres)
        assert "Rex" in top("ann", "what is my dog called?")
    finally:
        resources.index = saved


def test_search_serves_the_dense_ranking_fused_with_the_keyword_one(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    """The served order is MiniLM's ranking fused with BM25's (backend/retrieval/keyword.py),
    recomputed here from its parts; the keyword side moves a fact up that dense ranks 4th."""
    import numpy as np

    from backend.retrieval.embedder import get_embedder
    from backend.retrieval.keyword import KeywordIndex, fuse

    tenant, user = make_tenant(), "fused"
    texts = [*DISTRACTORS, "On 8 May 2023 the user visited Porto for a conference.",
             "Bolt was sick on Tuesday, so the user stayed home."]  # fmt: skip
    for text in texts:
        _add(api, tenant, user, text)
    query = "Anything about Toronto last year?"
    served = api.post(
        "/v1/memories/search",
        json={"user_id": user, "query": query, "top_k": len(texts)},
        headers=tenant.headers,
    ).json()["results"]

    embedder = get_embedder()
    cosine = embedder.embed(texts) @ embedder.embed([query])[0]
    dense = [int(i) for i in np.argsort(-cosine, kind="stable")]
    fused = fuse(dense, KeywordIndex(texts).ranking(query), 0.5)
    assert [r["memory"] for r in served] == [texts[i] for i in fused]
    assert fused != dense  # "last year" lifted Melanie's painting: the keyword side is served
    assert [round(r["score"], 4) for r in served] == [round(float(cosine[i]), 4) for i in fused]
