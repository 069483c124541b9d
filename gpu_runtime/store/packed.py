"""The runtime's durable KV store: per-tenant append-only segments with an index log.

This module only turns a ``FactKV`` into an extent's bytes and back (positions, keys, values,
viewed in place when read); the files are ``TenantLog``'s (torch-free), one per tenant
directory. Facts of one tenant share segment files, so a write is one append and one index
record instead of a file, and a batch of facts (an encoding step) shares its fsyncs.

Written and read by the connector's worker halves; the segments outlive the process, so a
restarted runtime (or another replica on a shared volume) serves them without re-encoding.
An extent that fails its checks is discarded and reported missing (it will be re-encoded),
never served. A deleted fact's extent is overwritten with zeros and synced before the delete
returns; a deleted tenant's files are dropped. Compaction (copying live extents out of mostly
dead segments) runs on a background thread, off the engine's steps.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from gpu_runtime.store.disk.compaction import Policy
from gpu_runtime.store.disk.paths import DiskLayout, tenant_dir_name
from gpu_runtime.store.disk.records import CorruptRecordError, ExtentBody, key_bytes, key_from_bytes
from gpu_runtime.store.disk.records import Extent as Extent
from gpu_runtime.store.disk.tenant_log import Item, TenantLog
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import FactKey, TenantId

logger = logging.getLogger(__name__)
MAX_OPEN_TENANTS = 4096  # tenant logs kept open (their indexes in memory) per process


def encode_fact(kv: FactKV) -> tuple[bytes, tuple[memoryview, ...]]:
    """Meta (dtype, shape, checksum, whether scales follow) and the payload buffers: positions,
    keys, values, then an FP8 fact's float32 key and value scales (in that order, so every
    tensor starts aligned to its element size: FP8 rows are ``head_dim`` bytes, a multiple of 4)."""
    meta: dict[str, Any] = {
        "dtype": str(kv.keys.dtype).removeprefix("torch."),
        "shape": list(kv.keys.shape),
        "checksum": kv.checksum,
    }
    parts: tuple[torch.Tensor, ...] = (kv.positions, kv.keys, kv.values)
    if kv.key_scales is not None and kv.value_scales is not None:
        meta["scales"] = "float32"  # [layers, n, heads] each, keys' then values'
        parts = (*parts, kv.key_scales, kv.value_scales)
    # [bytes] each: numpy arrays over the tensors' memory (bf16 and fp8 have no numpy dtype)
    arrays = [t.detach().cpu().contiguous().view(torch.uint8).numpy().reshape(-1) for t in parts]
    views = tuple(a.data for a in arrays)
    return json.dumps(meta, separators=(",", ":")).encode(), views


def decode_fact(body: ExtentBody) -> FactKV:
    """The tensors are views of the buffer the extent was read into (no copy)."""
    try:
        meta: dict[str, Any] = json.loads(body.meta)
        dtype = getattr(torch, str(meta["dtype"]))
        shape = tuple(int(d) for d in meta["shape"])
        checksum = str(meta["checksum"])
        scaled = meta.get("scales") == "float32"
    except (ValueError, KeyError, AttributeError, TypeError) as exc:
        raise CorruptRecordError(f"unreadable fact meta: {exc}") from exc
    if not isinstance(dtype, torch.dtype) or len(shape) != 4:
        raise CorruptRecordError("fact meta names no tensor layout")
    count = math.prod(shape)
    item = torch.empty((), dtype=dtype).element_size()
    n = shape[1]
    rows = count // shape[3] if shape[3] else 0  # layers * n * heads: one scale each
    kv_end = 8 * n + 2 * count * item
    if body.payload.nbytes != kv_end + (8 * rows if scaled else 0):
        raise CorruptRecordError("payload size does not match its meta")
    positions = _view(body.payload, torch.int64, n, 0)  # [n]
    keys = _view(body.payload, dtype, count, 8 * n).view(shape)  # [layers, n, heads, head_dim]
    values = _view(body.payload, dtype, count, 8 * n + count * item).view(shape)
    if not scaled:
        return FactKV(keys, values, positions, checksum)
    key_scales = _view(body.payload, torch.float32, rows, kv_end).view(shape[:3])
    value_scales = _view(body.payload, torch.float32, rows, kv_end + 4 * rows).view(shape[:3])
    return FactKV(keys, values, positions, checksum, key_scales, value_scales)


def _view(payload: memoryview, dtype: torch.dtype, count: int, offset: int) -> torch.Tensor:
    if count == 0:
        return torch.empty(0, dtype=dtype)
    return torch.frombuffer(payload, dtype=dtype, count=count, offset=offset)


class PackedKVStore:
    def __init__(
        self,
        root: Path | str,
        policy: Policy | None = None,
        *,
        background_compaction: bool = True,
        verify_checksum: bool = False,  # also re-hash (sha256) what the extent's crc checked
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.policy = policy or Policy()
        self.verify_checksum = verify_checksum
        self._logs: OrderedDict[TenantId, TenantLog] = OrderedDict()
        self._lock = threading.Lock()
        self._compactor = _Compactor(self) if background_compaction else None

    # ---- the durable store interface --------------------------------------------------------
    def put(self, key: FactKey, kv: FactKV) -> int:
        return self.put_many([(key, kv)])[0]

    def put_many(self, items: Iterable[tuple[FactKey, FactKV]]) -> list[int]:
        """Stores facts (any tenants), each tenant's batch with one sync; bytes on disk each."""
        by_tenant: dict[TenantId, list[tuple[int, Item]]] = {}
        count = 0
        for i, (key, kv) in enumerate(items):
            meta, payload = encode_fact(kv)
            by_tenant.setdefault(key.tenant, []).append((i, Item(key_bytes(key), meta, payload)))
            count += 1
        sizes = [0] * count
        for tenant, batch in by_tenant.items():
            extents = self.log(tenant).append([item for _, item in batch])
            for (i, _), extent in zip(batch, extents, strict=True):
                sizes[i] = extent.length
        return sizes

    def get(self, key: FactKey) -> FactKV | None:
        log = self.log(key.tenant)
        body = log.read(key_bytes(key))
        if body is None:
            return None
        try:
            kv = decode_fact(body)
            if self.verify_checksum and not kv.verify():
                raise CorruptRecordError("checksum mismatch")
        except CorruptRecordError:  # whole and crc-valid, yet not a fact: never serve it
            logger.warning("stored KV of %s is unreadable; discarding it", key)
            extent = log.lookup(key_bytes(key))
            if extent is not None:
                log.discard(key_bytes(key), extent)
            return None
        return kv

    def exists(self, key: FactKey) -> bool:
        return self.locate(key) is not None

    def locate(self, key: FactKey) -> Extent | None:
        return self.log(key.tenant).lookup(key_bytes(key))

    def size(self, key: FactKey) -> int | None:
        extent = self.locate(key)
        return extent.length if extent is not None else None

    def delete(self, key: FactKey) -> bool:
        return self.delete_many(key.tenant, [key]) > 0

    def delete_many(self, tenant: TenantId, keys: Iterable[FactKey]) -> int:
        """Zeroes and syncs every stored key's bytes, then commits their deletion (one sync);
        returns how many were stored. Nothing of them is readable once this returns."""
        wanted = list(keys)
        if any(key.tenant != tenant for key in wanted):
            raise ValueError("keys of another tenant")
        layout = DiskLayout(self.root)
        for key in wanted:  # a file of the previous file-per-fact layout, if one is left
            layout.path(key).unlink(missing_ok=True)
        removed = self.log(tenant).delete([key_bytes(k) for k in wanted])
        if removed and self._compactor is not None:
            self._compactor.consider(tenant)
        return removed

    def delete_tenant(self, tenant: TenantId) -> None:
        with self._lock:
            log = self._logs.pop(tenant, None)
        (log or self._new_log(tenant)).remove()

    def keys(self, tenant: TenantId) -> list[FactKey]:
        return sorted(key_from_bytes(k) for k, _ in self.log(tenant).index().items())

    def compact(self, tenant: TenantId) -> int:
        """Compacts the tenant's segments now; bytes given back."""
        return self.log(tenant).compact()

    def usage(self, tenant: TenantId | None = None) -> dict[str, int]:
        """Facts stored, their bytes, and the segment files' bytes (dead space included): of
        one tenant, or of every tenant directory under the root."""
        with self._lock:
            open_logs = {tenant_dir_name(t): log for t, log in self._logs.items()}
        if tenant is not None:
            names = [tenant_dir_name(tenant)]
        else:
            names = [p.name for p in self.root.iterdir() if p.is_dir()]
        out = {"disk_facts": 0, "disk_bytes": 0, "disk_segment_bytes": 0, "disk_segments": 0}
        for name in names:
            log = open_logs.get(name) or TenantLog(self.root / name, self.policy)
            index, sizes = log.index(), log.segment_sizes()
            out["disk_facts"] += len(index)
            out["disk_bytes"] += sum(index.live_bytes.values())
            out["disk_segment_bytes"] += sum(sizes.values())
            out["disk_segments"] += len(sizes)
        return out

    def close(self) -> None:
        if self._compactor is not None:
            self._compactor.stop()

    # ---- tenant logs ------------------------------------------------------------------------
    def log(self, tenant: TenantId) -> TenantLog:
        """The tenant's log, recovered on first use in this process."""
        with self._lock:
            log = self._logs.get(tenant)
            if log is not None:
                self._logs.move_to_end(tenant)
                return log
        log = self._new_log(tenant)
        log.recover()
        with self._lock:
            log = self._logs.setdefault(tenant, log)
            while len(self._logs) > MAX_OPEN_TENANTS:
                self._logs.popitem(last=False)
        return log

    def _new_log(self, tenant: TenantId) -> TenantLog:
        return TenantLog(self.root / tenant_dir_name(tenant), self.policy)


class _Compactor:
    """One daemon thread: compacts tenants whose deletes left segments mostly dead."""

    def __init__(self, store: PackedKVStore) -> None:
        self._store = store
        self._pending: OrderedDict[TenantId, None] = OrderedDict()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._busy = False

    def consider(self, tenant: TenantId) -> None:
        if not self._store.log(tenant).compaction_due():
            return
        with self._wake:
            self._pending[tenant] = None
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="inferscale-kv-compactor", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def idle(self) -> bool:
        with self._wake:
            return not self._pending and not self._busy

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._pending and not self._stopped:
                    self._busy = False
                    self._wake.wait()
                if self._stopped:
                    return
                tenant, _ = self._pending.popitem(last=False)
                self._busy = True
            try:
                self._store.compact(tenant)
            except Exception:  # a compaction that failed leaves the log as it was
                logger.exception("compaction of a tenant's KV segments failed")
