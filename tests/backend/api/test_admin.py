"""Tenants and keys through the API: auth, rotation, revocation, idempotency, errors."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from tests.support import ADMIN, TenantHandle

pytestmark = pytest.mark.db


def test_create_list_and_get_tenants(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    assert tenant.key.startswith("isk_")
    listed = api.get("/v1/tenants", params={"limit": 500}, headers=ADMIN).json()
    assert tenant.id in {t["id"] for t in listed["items"]}
    assert listed["total"] >= 1 and listed["limit"] == 500
    page = api.get("/v1/tenants", params={"limit": 1, "offset": 0}, headers=ADMIN).json()
    assert len(page["items"]) == 1
    assert api.get(f"/v1/tenants/{tenant.id}", headers=ADMIN).json()["id"] == tenant.id


def test_auth_errors_are_clear(api: TestClient, make_tenant: Callable[[], TenantHandle]) -> None:
    tenant = make_tenant()
    missing = api.get("/v1/tenants")
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "unauthorized"
    assert api.get("/v1/tenants", headers={"Authorization": "Bearer isk_nope"}).status_code == 401
    forbidden = api.get("/v1/tenants", headers=tenant.headers)
    assert forbidden.status_code == 403
    assert api.get("/v1/memories", params={"user_id": "u"}, headers=ADMIN).status_code == 403


def test_rotation_revokes_old_key(api: TestClient, make_tenant: Callable[[], TenantHandle]) -> None:
    tenant = make_tenant()
    rotated = api.post(f"/v1/tenants/{tenant.id}/keys", headers=ADMIN)
    assert rotated.status_code == 201
    new = {"Authorization": f"Bearer {rotated.json()['api_key']}"}
    assert (
        api.get("/v1/memories", params={"user_id": "u"}, headers=tenant.headers).status_code == 401
    )
    assert api.get("/v1/memories", params={"user_id": "u"}, headers=new).status_code == 200
    revoked = api.delete(f"/v1/tenants/{tenant.id}/keys/{rotated.json()['id']}", headers=ADMIN)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    assert api.get("/v1/memories", params={"user_id": "u"}, headers=new).status_code == 401


def test_idempotent_create_and_conflicts(api: TestClient) -> None:
    name = f"idem-{uuid.uuid4().hex[:8]}"
    headers = {**ADMIN, "Idempotency-Key": uuid.uuid4().hex}
    first = api.post("/v1/tenants", json={"name": name}, headers=headers)
    again = api.post("/v1/tenants", json={"name": name}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    other_body = api.post("/v1/tenants", json={"name": name + "x"}, headers=headers)
    assert other_body.status_code == 409
    duplicate = api.post("/v1/tenants", json={"name": name}, headers=ADMIN)
    assert duplicate.status_code == 409
    assert "already exists" in duplicate.json()["error"]["message"]


def test_bad_input_is_422_never_500(api: TestClient) -> None:
    for body in ({}, {"name": ""}, {"name": "bad/name"}, {"name": 5}):
        response = api.post("/v1/tenants", json=body, headers=ADMIN)
        assert response.status_code == 422, body
        assert response.json()["error"]["code"] == "invalid_request"
    assert api.get("/v1/tenants/not-a-uuid", headers=ADMIN).status_code == 422
    assert api.get(f"/v1/tenants/{uuid.uuid4()}", headers=ADMIN).status_code == 404


def test_deleting_a_tenant_revokes_its_keys(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    assert api.delete(f"/v1/tenants/{tenant.id}", headers=ADMIN).status_code == 204
    assert (
        api.get("/v1/memories", params={"user_id": "u"}, headers=tenant.headers).status_code == 401
    )
    assert api.get(f"/v1/tenants/{tenant.id}", headers=ADMIN).status_code == 404


def test_health_and_metrics(api: TestClient) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    ready = api.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["database"] == "ok"
    assert "inferscale_http_requests_total" in api.get("/metrics").text
    assert api.get("/docs").status_code == 200


def test_every_api_process_refuses_a_revoked_key_at_once(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    """Keys are cached per process (backend/services/credentials.py): a revocation through one
    process is seen by another's next request, the limits' change too."""
    from backend.main import create_app

    tenant = make_tenant()
    with TestClient(create_app()) as other:

        def status() -> int:
            return other.get(
                "/v1/memories", params={"user_id": "u"}, headers=tenant.headers
            ).status_code

        cache = other.app.state.resources.credentials  # type: ignore[attr-defined]
        for _ in range(2):
            assert status() == 200
        assert cache.hits >= 1  # the second request was served from the cache
        # One request a minute from now on: of two in a row the second is refused, if seen.
        limits = {"requests_per_minute": 1}
        changed = api.put(f"/v1/tenants/{tenant.id}/limits", json=limits, headers=ADMIN)
        assert changed.status_code == 200, changed.text
        statuses = [status() for _ in range(2)]
        assert 429 in statuses, statuses
        key_id = api.get(f"/v1/tenants/{tenant.id}/keys", headers=ADMIN).json()[0]["id"]
        assert api.delete(f"/v1/tenants/{tenant.id}/keys/{key_id}", headers=ADMIN).is_success
        assert status() == 401


def test_residency_lists_every_rank_and_sums_them(api: TestClient) -> None:
    body = api.get("/v1/admin/residency", headers=ADMIN).json()
    assert body["workers"], body
    for field in ("gpu_bytes", "host_bytes", "entries", "gpu_capacity_bytes", "evictions"):
        assert body["totals"][field] == sum(w[field] for w in body["workers"])
    assert "load_latency" not in body["totals"] and "replica" not in body["totals"]


def test_requests_in_flight_by_stage_for_operators(
    api: TestClient, make_tenant: Callable[[], TenantHandle]
) -> None:
    """The API's and each runtime replica's requests by stage (``/v1/admin/in-flight``): the
    runtime shows the stats request the API sent it; only the admin key sees any of it."""
    body = api.get("/v1/admin/in-flight", headers=ADMIN).json()
    assert set(body["api"]) == {"in_flight", "stuck_total"}
    ((runtime),) = body["runtimes"]
    assert runtime["in_flight"]["received"]["count"] >= 1  # the API's own stats request
    assert runtime["in_flight"]["received"]["oldest_s"] >= 0
    tenant = make_tenant()
    assert api.get("/v1/admin/in-flight", headers=tenant.headers).status_code == 403
    assert api.get("/v1/admin/in-flight").status_code == 401
