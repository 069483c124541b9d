"""Durable KV store: one file per fact, checksummed, written atomically.

Every process that serves or encodes (API, worker) sees the same files, so KV encoded by a
worker is served by the API's engine without re-encoding, and survives restarts. A file that
fails its checksum or does not parse is deleted and reported missing (it will be re-encoded),
never served.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId

SUFFIX = ".kv"


def _tenant_dir_name(tenant: TenantId) -> str:
    return hashlib.sha256(tenant.value.encode()).hexdigest()[:32]


def _file_name(key: FactKey) -> str:
    wire = json.dumps(key.to_wire(), sort_keys=True)
    return hashlib.sha256(wire.encode()).hexdigest() + SUFFIX


class DiskKVStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: FactKey) -> Path:
        return self.root / _tenant_dir_name(key.tenant) / _file_name(key)

    def put(self, key: FactKey, kv: FactKV) -> int:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        payload: dict[str, Any] = {
            "key": key.to_wire(),
            "checksum": kv.checksum,
            "keys": kv.keys.cpu(),
            "values": kv.values.cpu(),
            "positions": kv.positions.cpu(),
        }
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                torch.save(payload, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)  # readers see the old file or the whole new one
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target.stat().st_size

    def exists(self, key: FactKey) -> bool:
        return self.path(key).is_file()

    def get(self, key: FactKey) -> FactKV | None:
        path = self.path(key)
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            kv = FactKV(
                payload["keys"], payload["values"], payload["positions"], payload["checksum"]
            )
            if FactKey.from_wire(payload["key"]) != key or not kv.verify():
                raise ValueError("checksum or key mismatch")
        except FileNotFoundError:
            return None
        except Exception:  # corrupt or partial: never serve it; it will be re-encoded
            path.unlink(missing_ok=True)
            return None
        return kv

    def delete(self, key: FactKey) -> bool:
        try:
            self.path(key).unlink()
            return True
        except FileNotFoundError:
            return False

    def delete_tenant(self, tenant: TenantId) -> None:
        shutil.rmtree(self.root / _tenant_dir_name(tenant), ignore_errors=True)

    def keys(self, tenant: TenantId) -> list[FactKey]:
        folder = self.root / _tenant_dir_name(tenant)
        found = []
        for path in sorted(folder.glob("*" + SUFFIX)) if folder.is_dir() else []:
            try:
                payload = torch.load(path, map_location="cpu", weights_only=True)
                found.append(FactKey.from_wire(payload["key"]))
            except Exception:
                path.unlink(missing_ok=True)
        return found
