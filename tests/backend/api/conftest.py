"""API fixtures: the real app on the session's migrated database, tenants made through it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from tests.conftest import ADMIN_KEY


@dataclass(frozen=True)
class TenantHandle:
    id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="session")
def api(migrated_database: str, redis_clean: None) -> Iterator[TestClient]:
    """The app with a lazy in-process engine client (tests that never chat never start it)."""
    from backend.engine_client import InProcessEngineClient
    from backend.main import create_app
    from gpu_runtime.config import RuntimeSettings

    with TestClient(create_app(engine=InProcessEngineClient(RuntimeSettings()))) as client:
        yield client


@pytest.fixture
def make_tenant(api: TestClient) -> Callable[[], TenantHandle]:
    def make() -> TenantHandle:
        response = api.post(
            "/v1/tenants", json={"name": f"t-{uuid.uuid4().hex[:10]}"}, headers=ADMIN
        )
        assert response.status_code == 201, response.text
        body = response.json()
        return TenantHandle(body["id"], body["api_key"])

    return make
