"""Plain helpers shared by test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

ADMIN_KEY = os.environ.get("INFERSCALE_ADMIN_KEY", "test-admin-key")
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass(frozen=True)
class TenantHandle:
    id: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def small_pool() -> Any:
    """The session's KV pool budget (set small in conftest's environment)."""
    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.store.memory import PoolBudget

    s = RuntimeSettings()
    return PoolBudget(s.gpu_pool_bytes, s.host_pool_bytes, s.pool_slab_bytes)


def kv_store() -> Any:
    """The test process's shared KV store (the same one the runtime fixture serves from)."""
    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.store.memory import store_named

    return store_named("inferscale", RuntimeSettings().resolved_kv_store_dir, small_pool())
