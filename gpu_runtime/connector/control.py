"""WorkerControl: the runtime's out-of-band operations on one worker half, from plain arguments.

The runtime calls them through vLLM's ``collective_rpc`` (``WorkerRpc``, below),
which runs them on every worker between engine steps; arguments arrive as JSON-like values and
are checked here: every key must belong to the tenant the call names.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

from gpu_runtime.connector import timing
from gpu_runtime.connector.fused import FUSED_PLANS
from gpu_runtime.connector.worker import WorkerHalf
from gpu_runtime.errors import TenantMismatchError
from gpu_runtime.pool.entries import Tier
from gpu_runtime.pool.tensors import TieredKVPool
from gpu_runtime.types import FactKey, TenantId


def _cpu_name() -> str:
    info = Path("/proc/cpuinfo")
    for line in info.read_text().splitlines() if info.exists() else []:
        if line.startswith("model name"):
            return f"CPU {line.split(':', 1)[1].strip()}"
    return f"CPU {platform.machine()}"


def keys_from_wire(tenant: TenantId, wire: list[dict[str, Any]]) -> list[FactKey]:
    keys = [FactKey.from_wire(item) for item in wire]
    if any(key.tenant != tenant for key in keys):
        raise TenantMismatchError(f"a key of another tenant was named for {tenant.value!r}")
    return keys


class WorkerControl:
    def __init__(self, worker: WorkerHalf) -> None:
        self.worker = worker

    def purge(self, tenant: str, keys: list[dict[str, Any]]) -> int:
        who = TenantId(tenant)
        return self.worker.purge(who, keys_from_wire(who, keys))

    def purge_tenant(self, tenant: str) -> None:
        self.worker.purge_tenant(TenantId(tenant))

    def prefetch(self, tenant: TenantId, keys: list[FactKey]) -> None:
        """A prefetch hint (from the hint socket's thread: the pool locks itself), its keys
        decoded there (``hints.HintDecoder``), all of ``tenant``."""
        self.worker.prefetch(tenant, keys)

    def demote(self, tenant: str, keys: list[dict[str, Any]], tier: str) -> None:
        """Moves facts down to ``tier`` ("host" or "disk"): benchmarks of the offload path, or an
        operator making room ahead of a known burst."""
        pool = self.worker.store
        if not isinstance(pool, TieredKVPool):
            raise ValueError("this engine's store has no tiers")
        who = TenantId(tenant)
        pool.demote(who, keys_from_wire(who, keys), Tier(tier))

    def placement(self, tenant: str, keys: list[dict[str, Any]]) -> list[str | None]:
        """Each fact's tier in this worker's pool (``None``: not in memory here)."""
        who = TenantId(tenant)
        pool = self.worker.store
        wanted = keys_from_wire(who, keys)
        if not isinstance(pool, TieredKVPool):
            return [None] * len(wanted)
        return [None if p is None else p[0].value for p in pool.index.placements(who, wanted)]

    def stats(self, tenant: str | None) -> dict[str, Any]:
        """The pool's per-tier residency and counters (one tenant, or all with capacities),
        the facts and bytes held by the durable store and the per-tier load latency histogram."""
        who = TenantId(tenant) if tenant is not None else None
        store = self.worker.store
        out: dict[str, Any] = {}
        if isinstance(store, TieredKVPool):
            out.update(store.stats(who))
            out["load_latency"] = store.metrics.snapshot()
        disk = getattr(store, "disk", None)
        if disk is not None:  # disk_facts, disk_bytes, disk_segment_bytes, disk_segments
            out.update(disk.usage(who))
        fused = self.worker.fused
        if fused is not None and who is None:  # steps, not a tenant's: the operator's view
            out["fused_loads"] = {plan: fused.plans[plan] for plan in FUSED_PLANS}
        return out

    def describe(self) -> dict[str, Any]:
        worker = self.worker
        geometry = worker.layout.geometry
        device = worker.device
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
        return {
            "pid": os.getpid(),
            "device": str(device),
            "device_name": name,
            "layers": len(worker.layers),
            "kv_heads": geometry.num_kv_heads,
            "head_size": geometry.head_size,
            "block_size": geometry.block_size,
            "kv_dtype": str(geometry.dtype).removeprefix("torch."),
            "fact_kv_dtype": str(worker.codec.fact_dtype).removeprefix("torch."),
            "fused_kernel": worker.fused is not None,
            "store": type(worker.store).__name__,
        }


class WorkerRpc:
    """The runtime's ``collective_rpc`` surface on a worker, vLLM-free: the extension class vLLM
    mixes into its workers (``vllm_connector.InferScaleWorkerExtension``) supplies
    ``_inferscale``, the worker's control."""

    def _inferscale(self) -> WorkerControl:
        raise NotImplementedError

    def _tp_rank(self) -> int:
        raise NotImplementedError

    def inferscale_purge(self, tenant: str, keys: list[dict[str, Any]]) -> int:
        return self._inferscale().purge(tenant, keys)

    def inferscale_purge_tenant(self, tenant: str) -> None:
        self._inferscale().purge_tenant(tenant)

    def inferscale_demote(
        self, tenant: str, keys: list[dict[str, Any]], tier: str, ranks: list[int] | None = None
    ) -> None:
        """``ranks``: only on these tensor-parallel ranks (``None``: on every rank)."""
        if ranks is None or self._tp_rank() in ranks:
            self._inferscale().demote(tenant, keys, tier)

    def inferscale_placement(self, tenant: str, keys: list[dict[str, Any]]) -> list[str | None]:
        return self._inferscale().placement(tenant, keys)

    def inferscale_stats(self, tenant: str | None) -> dict[str, Any]:
        return self._inferscale().stats(tenant)

    def inferscale_trace(self, reset: bool) -> dict[str, Any]:
        """The connector's hook timings in this process (empty unless the runtime runs with
        ``INFERSCALE_TRACE_CONNECTOR=1``); ``reset`` starts the worker half's counts afresh.
        Where vLLM runs the worker inside its engine core, the scheduler half's cumulative
        totals show here too (``timing.SCHEDULER_HOOKS``)."""
        hooks = timing.snapshot()
        if reset:
            timing.reset(timing.WORKER_HOOKS + timing.LOAD_SECTIONS)
        return {"enabled": timing.ENABLED, "pid": os.getpid(), "hooks": hooks}
