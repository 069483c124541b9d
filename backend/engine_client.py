"""The backend's one door to the GPU runtime.

``EngineClient`` is the interface chat and the encoding jobs use. ``InProcessEngineClient`` runs
the runtime library inside this process (the engine starts on first use); a client for a separate
gpu_runtime service process will implement the same interface. Purging KV needs no engine: the
durable store is shared on disk.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Protocol

from gpu_runtime.composer import ComposedPrompt, FactText
from gpu_runtime.config import RuntimeSettings
from gpu_runtime.runtime import FactToEncode, InjectionRuntime, Mode, StreamEvent
from gpu_runtime.store.base import KVStore
from gpu_runtime.store.memory import PoolBudget, store_named
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

STORE_NAME = "inferscale"


class EngineClient(Protocol):
    def encoding_config(self) -> EncodingConfig: ...

    def is_started(self) -> bool: ...

    def encode(self, tenant: TenantId, facts: Sequence[FactToEncode]) -> dict[FactKey, int]: ...

    def has(self, tenant: TenantId, keys: Sequence[FactKey]) -> bool: ...

    def purge(self, tenant: TenantId, keys: Sequence[FactKey]) -> None: ...

    def purge_tenant(self, tenant: TenantId) -> None: ...

    def compose(
        self,
        tenant: TenantId,
        facts: Sequence[FactText],
        query: str,
        history: Sequence[tuple[str, str]],
        system: str | None,
    ) -> ComposedPrompt: ...

    def stream(
        self,
        tenant: TenantId,
        prompt: ComposedPrompt,
        mode: Mode,
        *,
        max_tokens: int,
        temperature: float,
        top_p: float,
        seed: int | None,
    ) -> Iterator[StreamEvent]: ...


class InProcessEngineClient:
    def __init__(self, settings: RuntimeSettings, runtime: InjectionRuntime | None = None) -> None:
        """``runtime``: an already running one to serve from (one in-process engine per process)."""
        self.settings = settings
        self._lock = threading.Lock()
        self._runtime: InjectionRuntime | None = runtime

    def budget(self) -> PoolBudget:
        s = self.settings
        return PoolBudget(s.gpu_pool_bytes, s.host_pool_bytes, s.pool_slab_bytes)

    @property
    def store(self) -> KVStore:
        if self._runtime is not None:
            return self._runtime.store
        return store_named(STORE_NAME, self.settings.resolved_kv_store_dir, self.budget())

    @property
    def runtime(self) -> InjectionRuntime:
        with self._lock:
            if self._runtime is None:
                self._runtime = InjectionRuntime.start(
                    self.settings,
                    store_name=STORE_NAME,
                    disk_root=str(self.settings.resolved_kv_store_dir),
                    pool=self.budget(),
                )
            return self._runtime

    def encoding_config(self) -> EncodingConfig:
        return EncodingConfig(
            self.settings.model_name, self.settings.window_turns, self.settings.encoding_version
        )

    def is_started(self) -> bool:
        return self._runtime is not None

    def encode(self, tenant: TenantId, facts: Sequence[FactToEncode]) -> dict[FactKey, int]:
        runtime = self.runtime
        runtime.encode(tenant, self.encoding_config(), facts)
        sizes = {}
        for fact in facts:
            kv = runtime.store.get(tenant, fact.key)
            sizes[fact.key] = kv.nbytes if kv is not None else 0
        return sizes

    def has(self, tenant: TenantId, keys: Sequence[FactKey]) -> bool:
        return self.store.contains_all(tenant, keys)

    def purge(self, tenant: TenantId, keys: Sequence[FactKey]) -> None:
        """Every tier, and this process's prefix cache, before the delete is acknowledged."""
        if self._runtime is not None:
            self._runtime.purge(tenant, keys)
        else:  # no engine here: no prefix cache to invalidate, the store is shared on disk
            for key in keys:
                self.store.delete(tenant, key)

    def purge_tenant(self, tenant: TenantId) -> None:
        self.store.delete_tenant(tenant)
        if self._runtime is not None:
            self._runtime.invalidate_prefix_cache(tenant)

    def compose(
        self,
        tenant: TenantId,
        facts: Sequence[FactText],
        query: str,
        history: Sequence[tuple[str, str]],
        system: str | None,
    ) -> ComposedPrompt:
        return self.runtime.compose(
            tenant, self.encoding_config(), facts, query, history=history, system=system
        )

    def stream(
        self,
        tenant: TenantId,
        prompt: ComposedPrompt,
        mode: Mode,
        *,
        max_tokens: int,
        temperature: float,
        top_p: float,
        seed: int | None,
    ) -> Iterator[StreamEvent]:
        return self.runtime.stream(
            tenant,
            prompt,
            mode,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
        )
