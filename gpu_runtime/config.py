"""RuntimeSettings: the GPU runtime process's one typed settings object."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def _default_home() -> Path:
    return Path.home() / ".cache" / "inferscale"


def _cpu_has_bf16() -> bool:
    """bf16 matrix units (AVX512-BF16 / AMX); without them vLLM-CPU runs bf16 ~4x slower."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def auto_dtype() -> str:
    import torch

    return "bfloat16" if torch.cuda.is_available() or _cpu_has_bf16() else "float32"


class RuntimeSettings(BaseSettings):
    """Engine, model and KV-budget settings, read from ``INFERSCALE_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="INFERSCALE_", extra="ignore")

    home: Path = Field(default_factory=_default_home)
    model_path: Path | None = None  # default: <home>/models/SmolLM2-135M-Instruct (prepared)
    dtype: str = "auto"  # auto: bfloat16 on GPUs and CPUs with bf16 units, else float32
    max_model_len: int = 4096
    kv_cache_space_gib: int = 1  # vLLM-CPU's paged cache (VLLM_CPU_KVCACHE_SPACE)
    gpu_memory_utilization: float = 0.85
    enforce_eager: bool = True  # CPU: no graphs; GPU deployments flip this off
    window_turns: int = Field(default=5, ge=0, le=64)  # w: turns of context a fact is encoded after
    encoding_version: int = Field(default=1, ge=1)
    gpu_pool_bytes: int = 1 << 30  # tiered KV pool: GPU slab arena (plain memory on CPU)
    host_pool_bytes: int = 4 << 30  # pinned host DRAM behind it; disk holds everything
    pool_slab_bytes: int = 1 << 18
    seed: int = 0
    kv_store_dir: Path | None = None  # default: <home>/kv (durable fact KV, shared by processes)

    @property
    def resolved_kv_store_dir(self) -> Path:
        return self.kv_store_dir or self.home / "kv"

    @property
    def resolved_dtype(self) -> str:
        return auto_dtype() if self.dtype == "auto" else self.dtype

    @property
    def model_name(self) -> str:
        """The encoding identity: stored KV is only ever served to the dtype that made it."""
        name = self.resolved_model_path.name
        dtype = self.resolved_dtype
        return name if dtype == "bfloat16" else f"{name}-{dtype}"

    @property
    def resolved_model_path(self) -> Path:
        return self.model_path or self.home / "models" / DEFAULT_MODEL_NAME
