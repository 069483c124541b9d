"""Whose retrieval index: the key of every per-user index (dense and keyword)."""

from __future__ import annotations

from dataclasses import dataclass

from gpu_runtime.types import TenantId


@dataclass(frozen=True)
class IndexKey:
    """Whose index: an end-user of one tenant. Two tenants may both have a user "alice"."""

    tenant: TenantId
    user_id: str

    def __post_init__(self) -> None:
        if not self.user_id:
            raise ValueError("user id must be non-empty")
