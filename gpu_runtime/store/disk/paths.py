"""Where the durable store keeps a tenant: a torch-free naming scheme every process can use.

One directory per tenant (its name a hash of the tenant id), so a tenant purge drops one
directory. Inside it the packed store keeps its segments and index (``tenant_log.py``); the
previous layout kept one file per fact (a hash of the whole key: ``DiskLayout``, used by the
benchmark's baseline, ``files.py``, and to remove such a file left from before on delete).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from gpu_runtime.types import FactKey, TenantId

SUFFIX = ".kv"


def tenant_dir_name(tenant: TenantId) -> str:
    return hashlib.sha256(tenant.value.encode()).hexdigest()[:32]


def fact_file_name(key: FactKey) -> str:
    wire = json.dumps(key.to_wire(), sort_keys=True)
    return hashlib.sha256(wire.encode()).hexdigest() + SUFFIX


class DiskLayout:
    """Paths of the file-per-fact layout under one store root; creates nothing."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def tenant_dir(self, tenant: TenantId) -> Path:
        return self.root / tenant_dir_name(tenant)

    def path(self, key: FactKey) -> Path:
        return self.tenant_dir(key.tenant) / fact_file_name(key)

    def exists(self, key: FactKey) -> bool:
        return self.path(key).is_file()

    def size(self, key: FactKey) -> int | None:
        """Bytes on disk, or ``None`` when the fact is not stored."""
        try:
            return self.path(key).stat().st_size
        except FileNotFoundError:
            return None
