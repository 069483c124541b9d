"""The previous durable layout: one file per fact, checksummed, written atomically.

No longer the runtime's store (that is ``packed.PackedKVStore``): kept as the baseline the store
benchmark measures the packed layout against, on the same facts. Each put is a ``torch.save``
to a temporary file, an fsync and a rename; a file that fails its checksum or does not parse is
deleted and reported missing, never served.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from gpu_runtime.store.disk.paths import SUFFIX, DiskLayout
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId


class FilePerFactKVStore:
    def __init__(self, root: Path) -> None:
        self.layout = DiskLayout(root)
        self.root = self.layout.root
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: FactKey) -> Path:
        return self.layout.path(key)

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
        if kv.key_scales is not None and kv.value_scales is not None:
            payload["key_scales"] = kv.key_scales.cpu()
            payload["value_scales"] = kv.value_scales.cpu()
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

    def put_many(self, items: Iterable[tuple[FactKey, FactKV]]) -> list[int]:
        return [self.put(key, kv) for key, kv in items]  # a file (and an fsync) per fact

    def exists(self, key: FactKey) -> bool:
        return self.layout.exists(key)

    def size(self, key: FactKey) -> int | None:
        return self.layout.size(key)

    def get(self, key: FactKey) -> FactKV | None:
        path = self.path(key)
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            kv = FactKV(
                payload["keys"], payload["values"], payload["positions"], payload["checksum"],
                payload.get("key_scales"), payload.get("value_scales"),
            )  # fmt: skip
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

    def delete_many(self, tenant: TenantId, keys: Iterable[FactKey]) -> int:
        return sum(1 for key in keys if key.tenant == tenant and self.delete(key))

    def delete_tenant(self, tenant: TenantId) -> None:
        shutil.rmtree(self.layout.tenant_dir(tenant), ignore_errors=True)

    def keys(self, tenant: TenantId) -> list[FactKey]:
        folder = self.layout.tenant_dir(tenant)
        found = []
        for path in sorted(folder.glob("*" + SUFFIX)) if folder.is_dir() else []:
            try:
                payload = torch.load(path, map_location="cpu", weights_only=True)
                found.append(FactKey.from_wire(payload["key"]))
            except Exception:
                path.unlink(missing_ok=True)
        return found

    def usage(self, tenant: TenantId | None = None) -> dict[str, int]:
        folder = self.layout.tenant_dir(tenant) if tenant is not None else self.root
        sizes = [p.stat().st_size for p in folder.rglob("*" + SUFFIX)] if folder.is_dir() else []
        total = sum(sizes)
        return {"disk_facts": len(sizes), "disk_bytes": total, "disk_segment_bytes": total}
