"""The dashboard's only data source: the backend's admin API."""

from __future__ import annotations

import os
from typing import Any

import httpx


class AdminClient:
    def __init__(
        self,
        base_url: str | None = None,
        admin_key: str | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url or os.environ.get("INFERSCALE_API_URL", "http://127.0.0.1:8000")
        key = admin_key or os.environ.get("INFERSCALE_ADMIN_KEY", "dev-admin-key")
        self._http = http or httpx.Client(base_url=self.base_url, timeout=10)
        self._auth = {"Authorization": f"Bearer {key}"}  # per request: the client may be shared

    def ready(self) -> dict[str, Any]:
        result: dict[str, Any] = self._http.get("/readyz").json()
        return result

    def tenants(self) -> list[dict[str, Any]]:
        response = self._http.get("/v1/admin/overview", headers=self._auth)
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json()["tenants"]
        return rows

    def requests(self, tenant_id: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if tenant_id:
            params["tenant_id"] = tenant_id
        response = self._http.get("/v1/admin/requests", params=params, headers=self._auth)
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json()["requests"]
        return rows
