"""Per-tenant limits at the API, counted in the session's real Redis: OpenAI's 429 with its
headers, the official SDK retrying it, the Mem0 routes under the same limits, tenants isolated,
refusals leaving nothing counted, overrides through the admin API."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from backend.api.metrics import TENANT_REQUESTS
from backend.core.config import Settings
from backend.main import create_app
from backend.services.rate_limits import TenantLimits
from gpu_runtime.types import TenantId
from tests.support import ADMIN, TenantHandle

pytestmark = pytest.mark.engine  # the app's client of the session's runtime (models, chat)

WINDOW_S = 2.0  # the "minute", shortened so a test can wait one out


@pytest.fixture(scope="module")
def http(api: TestClient) -> Iterator[TestClient]:
    """The app with a 2-second window and a runtime client of its own (a client's streaming
    sessions belong to its app's event loop, and the app closes them when it stops)."""
    with TestClient(create_app(Settings(rate_limit_window_s=WINDOW_S))) as client:
        yield client


def _tenant(http: TestClient, **limits: Any) -> TenantHandle:
    body = http.post("/v1/tenants", json={"name": f"rl-{uuid.uuid4().hex[:8]}"}, headers=ADMIN)
    tenant = TenantHandle(body.json()["id"], body.json()["api_key"])
    if limits:
        set_to = http.put(f"/v1/tenants/{tenant.id}/limits", json=limits, headers=ADMIN)
        assert set_to.status_code == 200, set_to.text
    return tenant


def _at_window_start() -> None:
    """Waits for a fresh window, so a test's requests all fall in one."""
    time.sleep(WINDOW_S - (time.time() % WINDOW_S) + 0.05)


def test_over_the_requests_limit_is_openais_429_with_its_headers(http: TestClient) -> None:
    tenant, neighbour = _tenant(http, requests_per_minute=2), _tenant(http, requests_per_minute=2)
    _at_window_start()
    assert [http.get("/v1/models", headers=tenant.headers).status_code for _ in range(2)] == [
        200,
        200,
    ]
    refused = http.get("/v1/models", headers=tenant.headers)
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    headers = refused.headers
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert 1 <= int(headers["retry-after"]) <= WINDOW_S
    assert 0 < int(headers["retry-after-ms"]) <= WINDOW_S * 1000
    assert headers["x-ratelimit-reset-requests"].endswith("s")
    # The neighbour's window is its own.
    assert http.get("/v1/models", headers=neighbour.headers).status_code == 200
    # A refusal is not counted: the window still holds the two requests let in.
    usage = http.get(f"/v1/tenants/{tenant.id}/limits", headers=ADMIN).json()["usage"]
    assert usage["requests_this_window"] == 2
    _at_window_start()
    assert http.get("/v1/models", headers=tenant.headers).status_code == 200


def test_the_official_sdk_retries_a_429_and_succeeds_once_the_window_passes(
    http: TestClient,
) -> None:
    tenant = _tenant(http, requests_per_minute=1)
    limited = TENANT_REQUESTS.labels(tenant.id, "limited")
    patient = openai.OpenAI(api_key=tenant.key, base_url=f"{http.base_url}/v1", http_client=http,
                            max_retries=3)  # fmt: skip
    impatient = patient.with_options(max_retries=0)
    _at_window_start()
    assert patient.models.list().data  # the window's one request
    with pytest.raises(openai.RateLimitError):
        impatient.models.list()  # the control: without retries, the 429 is the answer
    before = limited._value.get()
    started = time.monotonic()
    assert patient.models.list().data  # 429, Retry-After honoured, then let in
    assert limited._value.get() > before
    assert time.monotonic() - started >= 0.05


def test_mem0_routes_are_under_the_same_limits(http: TestClient) -> None:
    tenant = _tenant(http, requests_per_minute=1)
    _at_window_start()
    assert http.get("/v1/ping/", headers=tenant.headers).status_code == 200
    body = {"query": "anything", "filters": {"user_id": "u"}}
    refused = http.post("/v3/memories/search/", json=body, headers=tenant.headers)
    assert refused.status_code == 429
    assert "retry-after" in refused.headers


def test_requests_in_flight_are_capped_and_freed(http: TestClient) -> None:
    tenant = _tenant(http, max_concurrent_requests=1)
    limiter = http.app.state.resources.limiter  # type: ignore[attr-defined]
    held = limiter.admit(TenantId(tenant.id), TenantLimits(0, 0, 1))  # one request in flight
    refused = http.get("/v1/models", headers=tenant.headers)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    held.release()
    assert http.get("/v1/models", headers=tenant.headers).status_code == 200
    # ...and a request's own slot is given back once it is answered.
    assert http.get("/v1/models", headers=tenant.headers).status_code == 200
    usage = http.get(f"/v1/tenants/{tenant.id}/limits", headers=ADMIN).json()["usage"]
    assert usage["in_flight"] == 0


def test_the_admin_api_sets_reads_and_validates_limits(http: TestClient) -> None:
    tenant = _tenant(http)
    default = http.get(f"/v1/tenants/{tenant.id}/limits", headers=ADMIN).json()
    fields = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests", "fair_weight")
    assert default["overrides"] == dict.fromkeys(fields)
    assert default["effective"]["fair_weight"] == 1.0
    assert default["effective"]["requests_per_minute"] == Settings().rate_limit_requests
    wanted = {"tokens_per_minute": 0, "fair_weight": 2.5}
    changed = http.put(f"/v1/tenants/{tenant.id}/limits", json=wanted, headers=ADMIN).json()
    assert changed["effective"]["tokens_per_minute"] == 0  # no limit
    assert changed["effective"]["fair_weight"] == 2.5
    assert http.put(f"/v1/tenants/{tenant.id}/limits", json={"fair_weight": 0},
                    headers=ADMIN).status_code == 422  # fmt: skip
    bad = http.put(f"/v1/tenants/{tenant.id}/limits", json={"requests_per_minute": -1},
                   headers=ADMIN)  # fmt: skip
    assert bad.status_code == 422
    missing = http.put(f"/v1/tenants/{uuid.uuid4()}/limits", json={}, headers=ADMIN)
    assert missing.status_code == 404
    assert http.get(f"/v1/tenants/{tenant.id}/limits", headers=tenant.headers).status_code == 403


def test_tokens_are_counted_after_the_answer_and_refuse_the_windows_next_requests(
    http: TestClient,
) -> None:
    tenant = _tenant(http, tokens_per_minute=5)
    limiter = http.app.state.resources.limiter  # type: ignore[attr-defined]
    _at_window_start()
    first = limiter.admit(TenantId(tenant.id), TenantLimits(0, 5, 0))
    first.record_tokens(7)  # an answer's prompt + completion, over the limit
    first.release()
    refused = http.get("/v1/models", headers=tenant.headers)
    assert refused.status_code == 429
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"


def test_the_operators_view_counts_429s_and_a_deleted_tenant_leaves_no_counters(
    http: TestClient,
) -> None:
    import redis

    tenant = _tenant(http, requests_per_minute=1)
    _at_window_start()
    http.get("/v1/models", headers=tenant.headers)
    assert http.get("/v1/models", headers=tenant.headers).status_code == 429
    rows = http.get("/v1/admin/fairness", headers=ADMIN).json()["tenants"]
    mine = next(r for r in rows if r["tenant_id"] == tenant.id)
    assert mine["limited_total"] == 1 and mine["requests_this_window"] == 1
    store = redis.Redis.from_url(http.app.state.resources.settings.redis_url)  # type: ignore[attr-defined]
    pattern = f"inferscale:limits:{tenant.id}:*"
    assert list(store.scan_iter(match=pattern))
    assert http.delete(f"/v1/tenants/{tenant.id}", headers=ADMIN).status_code == 204
    assert not list(store.scan_iter(match=pattern))


def test_a_tenants_weight_reaches_the_runtimes_fair_gate(http: TestClient) -> None:
    tenant = _tenant(http, fair_weight=3.0)
    answer = http.post("/v1/chat/completions", headers=tenant.headers, json={
        "model": "inferscale", "max_tokens": 2, "memory": {"mode": "none"},
        "messages": [{"role": "user", "content": "Hello"}]})  # fmt: skip
    assert answer.status_code == 200, answer.text
    engine = http.app.state.resources.engine  # type: ignore[attr-defined]
    gate = engine.stats(tenant.id).fairness[tenant.id]
    assert gate["weight"] == 3.0 and gate["admitted"] == 1 and gate["decode_tokens"] >= 1
    rows = http.get("/v1/admin/fairness", headers=ADMIN).json()["tenants"]
    assert next(r for r in rows if r["tenant_id"] == tenant.id)["gate"]["admitted"] == 1
