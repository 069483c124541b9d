"""The runtime's JSON bodies, parsed by pydantic-core in one pass (``deps.json_body``): the same
models as FastAPI's own body handling, the same 422 ``invalid_request`` answers for bad input."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpu_runtime.server.deps import GenerateBody, KeysBody
from gpu_runtime.server.errors import install_error_handlers

pytestmark = pytest.mark.unit

SPAN = {"fact_id": "f1", "fact_version": 1, "window": 0, "encoding_version": 1}


@pytest.fixture
def client() -> TestClient:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/generate")
    async def generate(body: GenerateBody) -> dict[str, object]:
        assert body.segment is not None
        return {"tokens": len(body.token_ids), "spans": [s.fact_id for s in body.segment.spans]}

    @app.post("/keys")
    async def keys(body: KeysBody) -> dict[str, int]:
        return {"keys": len(body.keys)}

    return TestClient(app)


def test_a_valid_body_reaches_the_route_as_its_model(client: TestClient) -> None:
    body = {
        "tenant": "t", "token_ids": [1, 2, 3], "mode": "kv",
        "segment": {"window": 0, "version": 1, "spans": [{**SPAN, "start": 0, "n_tokens": 2}]},
    }  # fmt: skip
    answer = client.post("/generate", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"tokens": 3, "spans": ["f1"]}
    assert client.post("/keys", json={"tenant": "t", "keys": [SPAN, SPAN]}).json() == {"keys": 2}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"tenant": "t", "token_ids": [1, -2], "mode": "kv"}', "token_ids.1"),
        (b'{"tenant": "t", "token_ids": [], "mode": "kv"}', "token_ids"),
        (b'{"tenant": "t", "token_ids": [1], "mode": "both"}', "mode"),
        (b'{"tenant": "t", "token_ids": [1], "mode": "kv", "extra": 1}', "extra"),
        (b'{"tenant": "t", "token_ids": [1,', "JSON"),
        (b"", "JSON"),
    ],
)
def test_bad_bodies_are_422_invalid_request(client: TestClient, raw: bytes, says: str) -> None:
    answer = client.post("/generate", content=raw, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and says in error["message"], error
