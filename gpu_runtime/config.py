"""RuntimeSettings: the GPU runtime process's one typed settings object."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def _default_home() -> Path:
    return Path.home() / ".cache" / "inferscale"


class RuntimeSettings(BaseSettings):
    """Engine, model and KV-budget settings, read from ``INFERSCALE_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="INFERSCALE_", extra="ignore")

    home: Path = Field(default_factory=_default_home)
    model_path: Path | None = None  # default: <home>/models/SmolLM2-135M-Instruct (prepared)
    dtype: str = "bfloat16"
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
    def model_name(self) -> str:
        return self.resolved_model_path.name

    @property
    def resolved_model_path(self) -> Path:
        return self.model_path or self.home / "models" / DEFAULT_MODEL_NAME
