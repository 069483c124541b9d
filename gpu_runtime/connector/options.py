"""ConnectorOptions: how the runtime configures the connector in vLLM's engine processes.

vLLM hands ``kv_connector_extra_config`` (a plain dict) to every connector instance it makes, in
whichever process it makes it; this is that dict's one typed form. Each half builds its own state
from it: the scheduler half a catalog over the disk store, each worker half its own pool.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from gpu_runtime.pool.budget import PoolBudget


@dataclass(frozen=True)
class ConnectorOptions:
    disk_root: str | None = None  # the durable store, shared by every process and restart
    gpu_pool_bytes: int = 0  # 0: no tiered pool (memory backed by disk)
    host_pool_bytes: int = 0
    slab_bytes: int = 1 << 18
    tenant_gpu_quota_bytes: int | None = None
    scrub_blocks: bool = False  # tests: fill injected blocks with garbage before writing
    fault_rotation_offset: int = 0  # tests: injected keys rotated this many positions off
    fact_kv_dtype: str = "auto"  # how facts are stored: "auto" (as captured) or "fp8_e4m3"
    fused: bool | None = None  # None: the fused kernel on CUDA; True also on CPU (interpreter)
    exit_with_parent: int | None = None  # pid: the engine core exits when that process is gone

    @property
    def budget(self) -> PoolBudget | None:
        if not self.gpu_pool_bytes:
            return None
        return PoolBudget(
            self.gpu_pool_bytes, self.host_pool_bytes, self.slab_bytes, self.tenant_gpu_quota_bytes
        )

    def to_extra_config(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_extra_config(cls, extra: dict[str, Any] | None) -> ConnectorOptions:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (extra or {}).items() if k in names})
