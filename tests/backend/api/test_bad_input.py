"""Bad input gets a 4xx that names the problem, never a database error or a 500: NUL and
unpaired surrogates in every kind of string, ids and offsets beyond bigint, oversized bodies
and metadata, prompts beyond the context (real app, Postgres, runtime)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support import TenantHandle

pytestmark = pytest.mark.db

BEYOND_BIGINT = "9223372036854775808"
NUL = "a\x00b"


@pytest.fixture
def tenant(make_tenant: Callable[[], TenantHandle]) -> TenantHandle:
    return make_tenant()


def _chat(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "inferscale", "user": "u", "max_tokens": 4,
                            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    body.update(overrides)
    return body


X = [{"role": "user", "content": "x"}]

# (method, path, JSON body or None, query params or None, the field the message must name)
NUL_CASES: list[tuple[str, str, Any, Any, str]] = [
    ("POST", "/v1/memories", {"user_id": "u", "text": NUL}, None, "text"),
    ("POST", "/v1/memories", {"user_id": NUL, "text": "t"}, None, "user_id"),
    ("POST", "/v1/memories", {"user_id": "u", "text": "t", "metadata": {"k": NUL}}, None,
     "metadata"),
    ("POST", "/v1/memories", {"user_id": "u", "text": "t", "metadata": {NUL: 1}}, None,
     "metadata"),
    ("POST", "/v1/memories", {"user_id": "u", "text": "t", "metadata": {"k": [{"x": NUL}]}},
     None, "metadata"),
    ("POST", "/v1/memories", {"user_id": "u", "messages": [{"role": "user", "content": NUL}]},
     None, "content"),
    ("GET", "/v1/memories", None, {"user_id": NUL}, "user_id"),
    ("DELETE", "/v1/memories", None, {"user_id": NUL}, "user_id"),
    ("POST", "/v1/memories/search", {"user_id": NUL, "query": "q"}, None, "user_id"),
    ("POST", "/v1/memories/search", {"user_id": "u", "query": NUL}, None, "query"),
    ("PUT", f"/v1/memories/{uuid.uuid4()}", {"text": NUL}, None, "text"),
    ("POST", "/v1/chat/completions", _chat(user=NUL), None, "user"),
    ("POST", "/v1/chat/completions", _chat(messages=[{"role": "user", "content": NUL}]), None,
     "content"),
    ("POST", "/v1/conversations", {"user_id": "u", "turns": [{"speaker": "A", "text": NUL}]},
     None, "text"),
    ("POST", "/v1/conversations", {"user_id": "u", "locomo": {"conversation": {"x": NUL}}},
     None, "locomo"),
    # Mem0's surface (backend/api/routes/mem0.py)
    ("POST", "/v3/memories/add/", {"user_id": "u", "messages": [{"role": "user", "content": NUL}]},
     None, "content"),
    ("POST", "/v3/memories/add/", {"user_id": NUL, "messages": X}, None, "user_id"),
    ("POST", "/v3/memories/add/", {"user_id": "u", "metadata": {"k": NUL}, "messages": X},
     None, "metadata"),
    ("POST", "/v3/memories/add/", {"filters": {"user_id": NUL}, "messages": X}, None, "filters"),
    ("POST", "/v3/memories/search/", {"query": NUL, "filters": {"user_id": "u"}}, None, "query"),
    ("POST", "/v3/memories/search/", {"query": "q", "filters": {"user_id": NUL}}, None,
     "filters"),
    ("POST", "/v3/memories/", {"filters": {"metadata": {NUL: 1}}}, None, "filters"),
    ("PUT", f"/v1/memories/{uuid.uuid4()}/", {"text": NUL}, None, "text"),
    ("DELETE", "/v1/memories/", None, {"user_id": NUL}, "user_id"),
    ("PUT", "/v1/batch/", {"memories": [{"memory_id": NUL}]}, None, "memory_id"),
    ("DELETE", "/v2/entities/user/a%00b/", None, None, "entity_id"),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body", "params", "field"), NUL_CASES)
def test_nul_in_any_string_is_a_422_naming_the_field(
    api: TestClient, tenant: TenantHandle, method: str, path: str, body: Any, params: Any,
    field: str,
) -> None:  # fmt: skip
    response = api.request(method, path, json=body, params=params, headers=tenant.headers)
    assert response.status_code == 422, response.text
    message = response.json()["error"]["message"]
    assert field in message and "NUL" in message, message


@pytest.mark.parametrize(
    ("path", "raw", "field"),
    [
        ("/v1/memories", b'{"user_id": "u", "text": "a\\ud800b"}', "text"),
        ("/v1/memories", b'{"user_id": "u", "text": "t", "metadata": {"k": "\\udfff"}}',
         "metadata"),
        ("/v1/memories/search", b'{"user_id": "\\ud83d", "query": "q"}', "user_id"),
    ],
)  # fmt: skip
def test_unpaired_surrogate_is_a_422(
    api: TestClient, tenant: TenantHandle, path: str, raw: bytes, field: str
) -> None:
    headers = {**tenant.headers, "Content-Type": "application/json"}
    response = api.post(path, content=raw, headers=headers)
    assert response.status_code == 422, response.text
    message = response.json()["error"]["message"]
    # Pydantic refuses some unpaired surrogates itself ("unable to parse ... unicode"), ours
    # catches the rest; either way the field is named.
    assert message.startswith(field) and ("surrogate" in message or "unicode" in message), message


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        ("GET", f"/v1/memories/{BEYOND_BIGINT}", None),
        ("PUT", f"/v1/memories/{BEYOND_BIGINT}", None),
        ("DELETE", f"/v1/memories/{BEYOND_BIGINT}", None),
        ("GET", f"/v1/memories/{BEYOND_BIGINT}/history", None),
        ("GET", f"/v1/memories/{BEYOND_BIGINT}/encodings", None),
        ("GET", "/v1/memories/0", None),
        ("GET", "/v1/memories/-5", None),
        ("GET", "/v1/memories", {"user_id": "alice", "offset": BEYOND_BIGINT}),
        ("GET", "/v1/memories", {"user_id": "alice", "offset": "-1"}),
    ],
)
def test_ids_and_offsets_are_checked(
    api: TestClient, tenant: TenantHandle, method: str, path: str, params: Any
) -> None:
    body = {"text": "t"} if method == "PUT" else None
    response = api.request(method, path, json=body, params=params, headers=tenant.headers)
    assert response.status_code == 422, response.text


def test_admin_offset_beyond_bigint_is_a_422(api: TestClient) -> None:
    from tests.support import ADMIN_KEY

    response = api.get("/v1/tenants", params={"offset": BEYOND_BIGINT},
                       headers={"Authorization": f"Bearer {ADMIN_KEY}"})  # fmt: skip
    assert response.status_code == 422, response.text


def test_large_metadata_is_refused_and_small_is_kept(api: TestClient, tenant: TenantHandle) -> None:
    big = {"blob": "x" * 20_000}
    response = api.post("/v1/memories", json={"user_id": "u", "text": "t", "metadata": big},
                        headers=tenant.headers)  # fmt: skip
    assert response.status_code == 422, response.text
    assert "metadata" in response.json()["error"]["message"]
    fine = {"tags": ["a", "b"], "source": "test"}
    response = api.post("/v1/memories", json={"user_id": "u", "text": "t", "metadata": fine},
                        headers=tenant.headers)  # fmt: skip
    assert response.status_code == 201, response.text
    assert response.json()["results"][0]["metadata"] == fine


def test_oversized_body_is_a_413_by_length_and_when_chunked(
    api: TestClient, tenant: TenantHandle
) -> None:
    huge = json.dumps({"user_id": "u", "text": "x" * (5 * 1024 * 1024)}).encode()
    headers = {**tenant.headers, "Content-Type": "application/json"}
    response = api.post("/v1/memories", content=huge, headers=headers)
    assert response.status_code == 413, response.text
    assert response.json()["error"]["code"] == "payload_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts what arrives
        for start in range(0, len(huge), 65536):
            yield huge[start : start + 65536]

    response = api.post("/v1/memories", content=chunks(), headers=headers)
    assert response.status_code == 413, response.text
    small = json.dumps({"user_id": "u", "text": "fits"}).encode()
    response = api.post("/v1/memories", content=iter([small]), headers=headers)
    assert response.status_code == 201, response.text


def test_long_idempotency_key_is_a_validation_error(api: TestClient, tenant: TenantHandle) -> None:
    headers = {**tenant.headers, "Idempotency-Key": "k" * 201}
    response = api.post("/v1/memories", json={"user_id": "u", "text": "t"}, headers=headers)
    assert response.status_code == 422, response.text


@pytest.mark.engine
@pytest.mark.parametrize("stream", [False, True])
def test_prompt_beyond_the_context_is_a_400_before_the_engine(
    api: TestClient, tenant: TenantHandle, stream: bool
) -> None:
    body = _chat(messages=[{"role": "user", "content": "hello " * 20000}], stream=stream)
    response = api.post("/v1/chat/completions", json=body, headers=tenant.headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "context is" in error["message"]


@pytest.mark.engine
def test_max_tokens_beyond_the_room_left_is_a_400_and_a_default_is_cut_to_fit(
    api: TestClient, tenant: TenantHandle
) -> None:
    model = api.app.state.resources.engine.model()  # type: ignore[attr-defined]
    # A prompt that leaves less room than the default max_tokens (128) but more than 0.
    filler = "word " * (model.max_model_len - 120)
    asked = _chat(messages=[{"role": "user", "content": filler}], max_tokens=4000)
    response = api.post("/v1/chat/completions", json=asked, headers=tenant.headers)
    assert response.status_code == 400, response.text
    default = _chat(messages=[{"role": "user", "content": filler}])
    del default["max_tokens"]
    response = api.post("/v1/chat/completions", json=default, headers=tenant.headers)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= model.max_model_len
