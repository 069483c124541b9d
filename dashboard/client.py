"""The dashboard's only data source: the backend's admin API."""

from __future__ import annotations

import os
from typing import Any

import httpx


class AdminClient:
    def __init__(
        self,
        base_url: str | None = None,
        admin_key: str = "",
        http: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url or os.environ.get("INFERSCALE_API_URL", "http://127.0.0.1:8000")
        self._http = http or httpx.Client(base_url=self.base_url, timeout=10)
        self._auth = {
            "Authorization": f"Bearer {admin_key}"
        }  # per request: the client may be shared

    def _get(self, path: str, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        response = self._http.get(path, params=query, headers=self._auth)
        response.raise_for_status()
        return response.json()

    def ready(self) -> dict[str, Any]:
        result: dict[str, Any] = self._http.get("/readyz").json()
        return result

    def status(self) -> dict[str, Any]:
        """Every process's health, the runtime's model and pools (admin key checked here)."""
        result: dict[str, Any] = self._get("/v1/admin/status")
        return result

    def tenants(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._get("/v1/admin/overview")["tenants"]
        return rows

    def requests(self, tenant_id: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._get(
            "/v1/admin/requests", tenant_id=tenant_id, limit=limit
        )["requests"]
        return rows

    def fairness(self) -> list[dict[str, Any]]:
        """Per tenant: its limits' use and 429s, and its side of the runtime's fair gate."""
        rows: list[dict[str, Any]] = self._get("/v1/admin/fairness")["tenants"]
        return rows

    def in_flight(self) -> dict[str, Any]:
        """Requests in flight by stage: the API's (``in_flight``, ``stuck_total``) and each
        runtime replica's (``in_flight``: stage -> count and the oldest's seconds there)."""
        result: dict[str, Any] = self._get("/v1/admin/in-flight")
        return result

    def limits(self, tenant_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._get(f"/v1/tenants/{tenant_id}/limits")
        return result

    def set_limits(self, tenant_id: str, limits: dict[str, Any]) -> dict[str, Any]:
        """A tenant's own limits and weight (None: the platform's default; 0: no limit)."""
        response = self._http.put(f"/v1/tenants/{tenant_id}/limits", json=limits,
                                  headers=self._auth)  # fmt: skip
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def residency(self, tenant_id: str | None = None) -> dict[str, Any]:
        """The runtime's pool statistics: ``workers``, one per worker rank of every replica, and
        ``totals``, their counts and bytes summed by the API."""
        body: dict[str, Any] = self._get("/v1/admin/residency", tenant_id=tenant_id)
        return body

    def jobs(self, tenant_id: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._get("/v1/admin/jobs", tenant_id=tenant_id, limit=limit)[
            "jobs"
        ]
        return rows

    def reencode(self) -> None:
        response = self._http.post("/v1/admin/reencode", headers=self._auth)
        response.raise_for_status()

    # ---- the memory browser: one tenant's data -----------------------------------------------
    def users(self, tenant_id: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._get(f"/v1/admin/tenants/{tenant_id}/users")["users"]
        return rows

    def memories(
        self, tenant_id: str, user_id: str, query: str | None = None
    ) -> list[dict[str, Any]]:
        page = self._get(f"/v1/admin/tenants/{tenant_id}/memories", user_id=user_id,
                         query=query or None, limit=500)  # fmt: skip
        items: list[dict[str, Any]] = page["items"]
        return items

    def history(self, tenant_id: str, memory_id: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._get(
            f"/v1/admin/tenants/{tenant_id}/memories/{memory_id}/history"
        )
        return rows

    def update(self, tenant_id: str, memory_id: str, text: str) -> dict[str, Any]:
        response = self._http.put(f"/v1/admin/tenants/{tenant_id}/memories/{memory_id}",
                                  json={"text": text}, headers=self._auth)  # fmt: skip
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def delete(self, tenant_id: str, memory_id: str) -> dict[str, Any]:
        """Deletes the memory; answers where its KV is afterwards (nowhere)."""
        response = self._http.delete(f"/v1/admin/tenants/{tenant_id}/memories/{memory_id}",
                                     headers=self._auth)  # fmt: skip
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result
