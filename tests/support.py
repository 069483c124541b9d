"""Plain helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass

ADMIN_KEY = os.environ.get("INFERSCALE_ADMIN_KEY", "test-admin-key")
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass(frozen=True)
class TenantHandle:
    id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}
