"""The official ``openai`` SDK, pointed at the API, gets answers that use a stored memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from tests.support import ADMIN, TenantHandle

pytestmark = pytest.mark.engine

FACT = "The user's locker code is 4417."
QUESTION = "What is my locker code? Answer with the number."


@pytest.fixture(scope="module")
def served(api: TestClient) -> Iterator[tuple[TestClient, Any]]:
    """The app and its client of the session's runtime service."""
    yield api, api.app.state.resources.engine  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def tenant_with_memory(served: tuple[TestClient, Any]) -> TenantHandle:
    from backend.jobs.encoding import encode_facts

    http, client = served
    import uuid

    body = http.post(
        "/v1/tenants", json={"name": f"chat-{uuid.uuid4().hex[:8]}"}, headers=ADMIN
    ).json()
    tenant = TenantHandle(body["id"], body["api_key"])
    memories = [FACT, "The user's favourite colour is teal.", "The user lives in Lisbon."]
    ids = [
        http.post(
            "/v1/memories", json={"user_id": "alice", "text": m}, headers=tenant.headers
        ).json()["results"][0]["id"]
        for m in memories
    ]
    # The encoding job, run here through the API's own runtime client (it encodes fewer when
    # the session's Celery worker, if already up, took the API's job first; the chats below
    # check the facts come in as KV either way).
    assert encode_facts(tenant.id, ids, None, engine=client) <= len(ids)
    return tenant


def _sdk(http: TestClient, tenant: TenantHandle) -> openai.OpenAI:
    return openai.OpenAI(api_key=tenant.key, base_url=f"{http.base_url}/v1", http_client=http)


@pytest.mark.parametrize("mode", ["kv", "prompt"])
def test_sdk_chat_uses_stored_memory(
    served: tuple[TestClient, Any], tenant_with_memory: TenantHandle, mode: str
) -> None:
    http, _ = served
    completion = _sdk(http, tenant_with_memory).chat.completions.create(
        model="inferscale",
        messages=[{"role": "user", "content": QUESTION}],
        user="alice",
        max_tokens=24,
        temperature=0,
        extra_body={"memory": {"top_k": 3, "mode": mode}},
    )
    assert "4417" in (completion.choices[0].message.content or "")
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    extension = completion.model_extra["inferscale"]  # type: ignore[index]
    assert len(extension["memories"]) == 3
    if mode == "kv":
        assert extension["injected_tokens"] > 0  # the memories came in as KV, not prefill
    else:
        assert extension["injected_tokens"] == 0


def test_a_chat_that_names_no_top_k_retrieves_the_servers_default(
    served: tuple[TestClient, Any],
    tenant_with_memory: TenantHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    http, _ = served
    settings = http.app.state.resources.settings  # type: ignore[attr-defined]
    monkeypatch.setattr(settings, "chat_top_k", 2)
    monkeypatch.setattr(settings, "chat_top_k_gpu", 1)  # a GPU's own: this runtime is on a CPU
    completion = _sdk(http, tenant_with_memory).chat.completions.create(
        model="inferscale", messages=[{"role": "user", "content": QUESTION}], user="alice",
        max_tokens=1, temperature=0, extra_body={"memory": {"mode": "kv"}},
    )  # fmt: skip
    assert len(completion.model_extra["inferscale"]["memories"]) == 2  # type: ignore[index]


def test_a_kv_chats_prefetch_hint_names_its_preamble_and_facts(
    served: tuple[TestClient, Any],
    tenant_with_memory: TenantHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hint goes out before composing; the runtime pins what it names ahead of the load,
    which takes it only if it names the composed segment's keys (preamble first)."""
    http, client = served
    hints: list[list[Any]] = []
    composed: list[Any] = []
    composer = client.composer()
    compose, prefetch = composer.compose, client.prefetch

    def recording_compose(*args: Any, **kwargs: Any) -> Any:
        composed.append(compose(*args, **kwargs))
        return composed[-1]

    def recording_prefetch(tenant: Any, keys: Any) -> None:
        hints.append(list(keys))
        prefetch(tenant, keys)

    monkeypatch.setattr(composer, "compose", recording_compose)
    monkeypatch.setattr(client, "prefetch", recording_prefetch)
    _sdk(http, tenant_with_memory).chat.completions.create(
        model="inferscale",
        messages=[{"role": "system", "content": "Answer briefly."},
                  {"role": "user", "content": QUESTION}],
        user="alice", max_tokens=2, temperature=0,
        extra_body={"memory": {"top_k": 3, "mode": "kv"}},
    )  # fmt: skip
    [hint], [prompt] = hints, composed
    assert hint == [span.key for span in prompt.segment.spans]
    assert hint[0].is_preamble and len(hint) == 4


def test_the_default_memory_mode_is_hybrid(
    served: tuple[TestClient, Any], tenant_with_memory: TenantHandle
) -> None:
    """No ``memory`` options: hybrid with the server's ``recompute`` (2): of 3 facts, the two
    most relevant are prefilled, so fewer tokens are injected than in kv mode."""
    http, _ = served
    sdk = _sdk(http, tenant_with_memory)

    def ask(**extra: Any) -> Any:
        completion = sdk.chat.completions.create(
            model="inferscale", user="alice", max_tokens=24, temperature=0,
            messages=[{"role": "user", "content": QUESTION}], **extra,
        )  # fmt: skip
        return completion, completion.model_extra["inferscale"]

    default, extension = ask()
    _, kv = ask(extra_body={"memory": {"top_k": 5, "mode": "kv"}})
    assert extension["mode"] == "hybrid" and len(extension["memories"]) == 3
    assert "4417" in (default.choices[0].message.content or "")
    # kv's segment ends two facts later (some of it may come from the prefix cache, whose
    # blocks a kv request shares with the earlier kv test's identical prompt)
    assert 0 < extension["injected_tokens"] < kv["injected_tokens"] + kv["cached_tokens"]


def test_a_hybrid_budget_in_tokens_prefills_more_as_it_grows(
    served: tuple[TestClient, Any], tenant_with_memory: TenantHandle
) -> None:
    """``memory.recompute_tokens``: no budget injects every fact (as kv), one larger than all
    three facts prefills them all (nothing injected: the preamble alone runs as prompt mode);
    the answer stays right."""
    http, _ = served
    sdk = _sdk(http, tenant_with_memory)

    def ask(budget: int) -> tuple[str, int]:
        completion = sdk.chat.completions.create(
            model="inferscale", user="alice", max_tokens=24, temperature=0,
            messages=[{"role": "user", "content": QUESTION}],
            extra_body={"memory": {"top_k": 5, "mode": "hybrid", "recompute_tokens": budget}},
        )  # fmt: skip
        extension = completion.model_extra["inferscale"]  # type: ignore[index]
        return completion.choices[0].message.content or "", int(extension["injected_tokens"])

    none_text, none_injected = ask(0)
    all_text, all_injected = ask(4096)
    assert "4417" in none_text and "4417" in all_text
    assert all_injected == 0 < none_injected  # every fact prefilled, against every fact injected


def test_sdk_streaming_matches_non_streaming(
    served: tuple[TestClient, Any], tenant_with_memory: TenantHandle
) -> None:
    http, _ = served
    sdk = _sdk(http, tenant_with_memory)
    request: dict[str, Any] = {
        "model": "inferscale",
        "messages": [{"role": "user", "content": QUESTION}],
        "user": "alice",
        "max_tokens": 24,
        "temperature": 0,
    }
    whole = sdk.chat.completions.create(**request).choices[0].message.content
    pieces = [
        chunk.choices[0].delta.content or ""
        for chunk in sdk.chat.completions.create(**request, stream=True)
        if chunk.choices
    ]
    assert len([p for p in pieces if p]) > 1  # tokens arrived as they were made
    assert "".join(pieces) == whole


def test_memory_mode_none_and_bad_requests(
    served: tuple[TestClient, Any], tenant_with_memory: TenantHandle
) -> None:
    http, _ = served
    sdk = _sdk(http, tenant_with_memory)
    plain = sdk.chat.completions.create(
        model="inferscale",
        messages=[{"role": "user", "content": QUESTION}],
        user="alice",
        max_tokens=24,
        extra_body={"memory": {"mode": "none"}},
    )
    assert "4417" not in (plain.choices[0].message.content or "")
    with pytest.raises(openai.UnprocessableEntityError):
        sdk.chat.completions.create(
            model="inferscale", messages=[{"role": "assistant", "content": "hi"}], user="alice"
        )
    with pytest.raises(openai.UnprocessableEntityError):
        sdk.chat.completions.create(model="inferscale", messages=[], user="alice")


def test_request_log_records_latency(
    served: tuple[TestClient, Any], tenant_with_memory: TenantHandle
) -> None:
    from backend.db.session import session_scope
    from backend.repositories.requests import RequestLogRepository
    from gpu_runtime.types import TenantId

    with session_scope() as session:
        rows = RequestLogRepository(session, TenantId(tenant_with_memory.id)).recent()
    assert rows and {r.mode for r in rows} >= {"kv", "prompt"}
    assert all(r.ttft_ms > 0 and r.total_ms >= r.ttft_ms for r in rows)


def test_a_chat_serves_a_memory_as_it_is_now(served: tuple[TestClient, Any]) -> None:
    """A chat takes its facts' texts from the keyword cache at the user's revision (no query
    for them): an update, a delete and an add each show in the very next chat."""
    import uuid

    http, _ = served
    body = http.post(
        "/v1/tenants", json={"name": f"now-{uuid.uuid4().hex[:8]}"}, headers=ADMIN
    ).json()
    tenant = TenantHandle(body["id"], body["api_key"])
    sdk = _sdk(http, tenant)

    def remember(text: str) -> str:
        added = http.post("/v1/memories", json={"user_id": "bo", "text": text},
                          headers=tenant.headers)  # fmt: skip
        assert added.status_code == 201, added.text
        return str(added.json()["results"][0]["id"])

    def ask() -> tuple[int, list[str]]:
        completion = sdk.chat.completions.create(
            model="inferscale", user="bo", max_tokens=1, temperature=0,
            messages=[{"role": "user", "content": QUESTION}],
            extra_body={"memory": {"top_k": 5, "mode": "prompt"}},
        )  # fmt: skip
        assert completion.usage is not None
        return completion.usage.prompt_tokens, completion.model_extra["inferscale"]["memories"]  # type: ignore[index]

    code = remember(FACT)
    short, memories = ask()
    assert memories == [code] and ask() == (short, memories)  # the second from the cache
    longer = FACT + " It is on the second floor, beside the gym's north entrance."
    assert http.put(f"/v1/memories/{code}", json={"text": longer},
                    headers=tenant.headers).status_code == 200  # fmt: skip
    grown, _ = ask()
    assert grown > short  # the new text, not the cached one
    other = remember("The user's bike lock code is 2290.")
    assert set(ask()[1]) == {code, other}
    assert http.delete(f"/v1/memories/{code}", headers=tenant.headers).status_code == 200
    assert ask()[1] == [other]


def test_a_chat_is_tracked_by_stage_under_its_id_and_leaves_nothing_in_flight(
    served: tuple[TestClient, Any], tenant_with_memory: TenantHandle
) -> None:
    """Each request is in flight under one id from arrival to its stream's end, in the API and
    in the runtime (gpu_runtime/client/inflight.py): the id is answered, and once the chat
    is over neither process holds it in any stage."""
    http, engine = served
    body = {"model": "inferscale", "messages": [{"role": "user", "content": QUESTION}],
            "user": "alice", "max_tokens": 8, "stream": True, "memory": {"mode": "kv"}}  # fmt: skip
    headers = {**tenant_with_memory.headers, "x-request-id": "chat-tracked-1"}
    with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["x-request-id"] == "chat-tracked-1"
        assert "[DONE]" in "".join(response.iter_text())
    fresh = http.get("/healthz")
    assert len(fresh.headers["x-request-id"]) == 32  # none sent: a new one
    inflight = http.app.state.resources.inflight  # type: ignore[attr-defined]
    assert inflight.snapshot() == {}
    runtime = engine.replicas.home(tenant_with_memory.id).client
    assert set(runtime.stats().in_flight) == {"received"}  # only this stats request itself
