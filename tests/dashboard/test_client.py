"""The dashboard's admin client against the real API: residency and latency data per tenant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from dashboard.client import AdminClient
from tests.support import ADMIN_KEY, TenantHandle

pytestmark = pytest.mark.db


def test_overview_counts_facts_per_tenant(
    api: Any, make_tenant: Callable[[], TenantHandle]
) -> None:
    tenant = make_tenant()
    for text in ("The user likes jazz.", "The user owns a red bike."):
        api.post("/v1/memories", json={"user_id": "dash", "text": text}, headers=tenant.headers)
    client = AdminClient(admin_key=ADMIN_KEY, http=api)
    row = next(t for t in client.tenants() if t["tenant_id"] == tenant.id)
    assert row["users"] == 1 and row["facts"] == 2
    assert row["encodings_ready"] + row["encodings_waiting"] == 2
    assert isinstance(client.requests(tenant.id), list)
    assert api.get("/v1/admin/overview", headers=tenant.headers).status_code == 403
