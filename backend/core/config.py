"""The backend's one typed settings object (env vars prefixed ``INFERSCALE_`` or bare names)."""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

from gpu_runtime.client.startup import is_loopback as is_loopback  # (re-exported)

PLACEHOLDER_SECRETS = frozenset(
    {"", "changeme", "change-me", "dev-admin-key", "dev-service-token", "secret"}
)
SECRET_FIELDS = ("admin_api_key", "api_key_pepper", "service_token")
# A directory of files named like the variables (INFERSCALE_ADMIN_KEY, ...), e.g. the secrets
# `inferscale secrets init` generates in docker compose; a variable that is set wins over a file.
SECRETS_DIR_VAR = "INFERSCALE_SECRETS_DIR"


class Settings(BaseSettings):
    """Everything the API, the worker and the migrations need, with local defaults that work."""

    model_config = SettingsConfigDict(
        env_file=".env", extra="ignore", populate_by_name=True, env_ignore_empty=True
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
        secrets = SecretsSettingsSource(settings_cls, secrets_dir=os.environ.get(SECRETS_DIR_VAR))
        return init_settings, env_settings, dotenv_settings, secrets

    environment: Literal["dev", "test", "prod"] = Field(
        default="dev", validation_alias="INFERSCALE_ENV"
    )
    database_url: str = Field(
        default="postgresql+psycopg://postgres@127.0.0.1:5432/inferscale",
        validation_alias="DATABASE_URL",
    )
    database_pool_size: int = Field(default=20, ge=1, validation_alias="DATABASE_POOL_SIZE")
    database_pool_overflow: int = Field(default=30, ge=0, validation_alias="DATABASE_POOL_OVERFLOW")
    # Connections all of the API's processes may hold together: each process's pool is cut to
    # its share (INFERSCALE_API_WORKERS). Postgres refuses connections beyond its
    # max_connections (100 by default) with "too many clients", to the workers and migrations
    # too: 4 API processes' pools of 50 did at 100 users on the CPU box. The rest of the
    # server's limit is for the workers, beat, the dashboard and an operator.
    database_max_connections: int = Field(
        default=80, ge=1, validation_alias="DATABASE_MAX_CONNECTIONS"
    )
    database_pool_timeout_s: float = Field(
        default=10.0, gt=0, validation_alias="DATABASE_POOL_TIMEOUT_S"
    )
    # Connections an API process opens as it starts (at most the pool's size), so that its first
    # concurrent requests after a deploy or a restart do not each wait for a new one.
    database_pool_warm: int = Field(default=8, ge=0, validation_alias="DATABASE_POOL_WARM")
    # Once an API process is up, what it allocated so far (~230,000 objects) is frozen out of the
    # collector's full passes, which took ~80 ms on the CPU box, each a stall of the process's
    # event loop and its streams. (At 100 users on an H100 host the API's share did not move
    # beyond the runs' noise with it: docs/benchmarks.md, "Run 13"; the runtime's did.)
    gc_freeze_at_start: bool = Field(default=True, validation_alias="INFERSCALE_GC_FREEZE_AT_START")
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", validation_alias="REDIS_URL")
    # Once a call finds Redis unreachable, the process's calls to it take their fallbacks at once
    # (limits let requests in, API keys come from Postgres, jobs wait in the outbox) and Redis is
    # probed this often in the background until it answers (backend.core.breaker).
    redis_retry_after_s: float = Field(
        default=2.0, gt=0, le=300, validation_alias="INFERSCALE_REDIS_RETRY_AFTER_S"
    )
    # A task a worker took but never acknowledged (the worker died mid-job) goes back to the
    # queue after this long. Longer than any job runs, or a running job would be sent twice.
    task_visibility_timeout_s: int = Field(
        default=1800, ge=5, validation_alias="INFERSCALE_TASK_VISIBILITY_TIMEOUT_S"
    )
    # A running job whose worker has not touched it for this long (its heartbeat: every quarter
    # of it) is taken to have lost its worker and is sent again (backend.jobs.pipeline.outbox).
    job_stall_s: float = Field(default=120.0, ge=4, validation_alias="INFERSCALE_JOB_STALL_S")
    # Fair background work: a tenant's jobs in the broker's queues (sent, not finished) at most;
    # its others wait in the outbox and go as its jobs finish, so one tenant's bulk import never
    # queues another's encodes behind all of it (0: no cap). Keep it >= the workers' concurrency.
    job_tenant_inflight: int = Field(
        default=2, ge=0, le=10_000, validation_alias="INFERSCALE_JOB_TENANT_INFLIGHT"
    )
    admin_api_key: str = Field(default="dev-admin-key", validation_alias="INFERSCALE_ADMIN_KEY")
    api_key_pepper: str = Field(default="changeme", validation_alias="INFERSCALE_KEY_PEPPER")
    # The runtime service (python -m gpu_runtime serve) and the token it requires.
    runtime_url: str = Field(
        default="http://127.0.0.1:8100", validation_alias="INFERSCALE_RUNTIME_URL"
    )
    # Several runtime replicas (one per GPU or engine), comma-separated: each tenant is served by
    # one of them (rendezvous hashing over the healthy ones). Empty: INFERSCALE_RUNTIME_URL alone.
    # Every process (API, workers) must list the same URLs (order does not matter), and the
    # replicas must share one INFERSCALE_KV_STORE_DIR.
    runtime_urls: str = Field(default="", validation_alias="INFERSCALE_RUNTIME_URLS")
    # How long a replica's health stands before the next lazy /readyz probe.
    runtime_probe_interval_s: float = Field(
        default=5.0, gt=0, validation_alias="INFERSCALE_RUNTIME_PROBE_INTERVAL_S"
    )
    service_token: str = Field(
        default="dev-service-token", validation_alias="INFERSCALE_SERVICE_TOKEN"
    )
    runtime_timeout_s: float = Field(
        default=300.0, gt=0, validation_alias="INFERSCALE_RUNTIME_TIMEOUT_S"
    )
    # A request with no progress for this long is logged with where it waits (its thread's
    # stack or its task's awaits) and counted (gpu_runtime/client/inflight.py says why).
    stuck_request_s: float = Field(
        default=30.0, gt=0, validation_alias="INFERSCALE_STUCK_REQUEST_S"
    )
    # Where the API and the dashboard listen (`inferscale api`, `inferscale dashboard`).
    api_host: str = Field(default="127.0.0.1", validation_alias="INFERSCALE_API_HOST")
    api_port: int = Field(default=8000, ge=1, le=65535, validation_alias="INFERSCALE_API_PORT")
    dashboard_host: str = Field(default="127.0.0.1", validation_alias="INFERSCALE_DASHBOARD_HOST")
    # API processes (uvicorn workers): each its own index and embedder; one is enough for a
    # small host, a GPU host's core count serves many more concurrent chats with several.
    api_workers: int = Field(default=1, ge=1, le=64, validation_alias="INFERSCALE_API_WORKERS")
    dashboard_port: int = Field(
        default=8501, ge=1, le=65535, validation_alias="INFERSCALE_DASHBOARD_PORT"
    )
    # Largest request body accepted (413 beyond it); a LoCoMo conversation is about 300 KB.
    max_request_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, validation_alias="INFERSCALE_MAX_REQUEST_BYTES"
    )
    # The encoding policy: w turns of context per fact, and the procedure's version. w=0 by
    # default: on full-scale LoCoMo (docs/accuracy.md) w=5 cost kv 5-9 F1 points against w=0,
    # nearly all of it on adversarial questions; w>0 stays available for conversations whose
    # facts lean on their turns ("he", "that one").
    window_turns: int = Field(default=0, ge=0, le=64, validation_alias="INFERSCALE_WINDOW_TURNS")
    # Version 1 wrote each fact after "- "; its KV does not match today's prompts (fact_line),
    # so it is refused rather than served: the beat re-encodes every fact under the new version.
    encoding_version: int = Field(default=2, ge=2, validation_alias="INFERSCALE_ENCODING_VERSION")
    # Hybrid injection: how many of the most relevant retrieved facts are prefilled as text after
    # the injected ones when a chat does not say (docs/accuracy.md).
    hybrid_recompute: int = Field(
        default=2, ge=0, le=200, validation_alias="INFERSCALE_HYBRID_RECOMPUTE"
    )
    # Hybrid injection by a budget in tokens instead (the most relevant facts prefilled while
    # they fit): what a prefill costs is tokens, not facts. None: the count above.
    hybrid_recompute_tokens: int | None = Field(
        default=None, ge=0, le=32768, validation_alias="INFERSCALE_HYBRID_RECOMPUTE_TOKENS"
    )
    # ... and the budget when the runtime serves on a GPU and neither this setting nor the chat
    # says: there a prefill of a few hundred tokens costs an 8B model well under a millisecond,
    # and 400 tokens (~10 LoCoMo facts) held hybrid within 0.1-0.7 F1 points of prompt mode on
    # the dev set, against 0.5-1.4 for r=2 (docs/accuracy.md). On a CPU the prefill is the whole
    # cost, so the count above stays. 0: the count above on a GPU too.
    hybrid_recompute_tokens_gpu: int = Field(
        default=400, ge=0, le=32768, validation_alias="INFERSCALE_HYBRID_RECOMPUTE_TOKENS_GPU"
    )

    # How many of the user's memories a chat retrieves when it does not say (memory.top_k), and
    # instead when the runtime serves on a GPU (0: the same), where an injected fact costs far
    # less than on a CPU (kv TTFT 2.2x at k=50 against k=5 there, docs/benchmarks.md). Both 5:
    # on the dev set hybrid scored 0.216 at k=5 and 0.222 / 0.214 at k=20 / 50 on an H100
    # (docs/accuracy.md, "How a fact is written into the prompt"), no gain worth the tokens.
    chat_top_k: int = Field(default=5, ge=0, le=200, validation_alias="INFERSCALE_TOP_K")
    chat_top_k_gpu: int = Field(default=0, ge=0, le=200, validation_alias="INFERSCALE_TOP_K_GPU")

    # Each tenant's limits unless its row says otherwise (0: no limit), counted in Redis so they
    # hold across API processes and hosts: requests and tokens (prompt + completion) per window,
    # and requests in flight. Over a limit: OpenAI's 429 with x-ratelimit-* and Retry-After.
    rate_limit_requests: int = Field(
        default=6000, ge=0, validation_alias="INFERSCALE_RATE_LIMIT_RPM"
    )
    rate_limit_tokens: int = Field(
        default=10_000_000, ge=0, validation_alias="INFERSCALE_RATE_LIMIT_TPM"
    )
    rate_limit_concurrent: int = Field(
        default=256, ge=0, validation_alias="INFERSCALE_RATE_LIMIT_CONCURRENT"
    )
    # The window the per-minute limits count over (seconds; 60 unless a test shortens it).
    rate_limit_window_s: float = Field(
        default=60.0, gt=0, le=3600, validation_alias="INFERSCALE_RATE_LIMIT_WINDOW_S"
    )

    # Each API process keeps what tenant keys resolved to (up to this many keys; 0: off, every
    # request queries Postgres); a change to keys, tenants or limits invalidates every process's
    # entries through Redis, and an entry lives at most the TTL (backend/services/credentials.py).
    auth_cache_entries: int = Field(
        default=10_000, ge=0, validation_alias="INFERSCALE_AUTH_CACHE_ENTRIES"
    )
    auth_cache_ttl_s: float = Field(
        default=60.0, gt=0, le=3600, validation_alias="INFERSCALE_AUTH_CACHE_TTL_S"
    )

    # Each API or worker process keeps per-user retrieval indexes up to this many bytes (the
    # least recently used users' go first and are rebuilt from Postgres on their next search;
    # a user with 300 facts takes ~480 KB; docs/capacity.md, "The API tier").
    # Where a query is embedded: "auto" on the runtime's device when it serves the same model
    # (GPU runtimes do; checked against this process's own pass once per runtime start), else
    # here; "local" always here; "runtime" like auto, with a warning when it cannot.
    query_embedding: Literal["auto", "local", "runtime"] = Field(
        default="auto", validation_alias="INFERSCALE_QUERY_EMBEDDING"
    )
    # Keyword (BM25) ranking fused with the dense one by reciprocal rank, this weight on the
    # keyword side (0: dense only). 0.5 measured best on LoCoMo (docs/accuracy.md, "Retrieval").
    retrieval_keyword_weight: float = Field(
        default=0.5, ge=0, le=10, validation_alias="INFERSCALE_RETRIEVAL_KEYWORD_WEIGHT"
    )
    keyword_cache_bytes: int = Field(
        default=128 * 1024 * 1024, ge=1 << 20, validation_alias="INFERSCALE_KEYWORD_CACHE_BYTES"
    )
    index_cache_bytes: int = Field(
        default=512 * 1024 * 1024, ge=1 << 20, validation_alias="INFERSCALE_INDEX_CACHE_BYTES"
    )
    # Search per-user indexes on a GPU mirror (needs FAISS's GPU build). Off: on the H200 host
    # one query over a user's 169 facts took 12-18 us on the CPU and 56-71 us on the GPU; the GPU
    # wins from ~1,000 facts per index (docs/benchmarks.md, "FAISS: which search runs where").
    index_on_gpu: bool = Field(default=False, validation_alias="INFERSCALE_INDEX_ON_GPU")
    # OpenMP threads of FAISS's CPU searches (0: FAISS's default, one per core). One query over
    # one user's few hundred facts gains nothing from a team of threads, whose threads libgomp
    # keeps busy-waiting a while after each search (docs/benchmarks.md, run 17).
    index_search_threads: int = Field(
        default=1, ge=0, le=256, validation_alias="INFERSCALE_INDEX_SEARCH_THREADS"
    )

    # Names the chat API answers to besides the served model's own (comma-separated); any other
    # `model` is OpenAI's 404 model_not_found.
    model_aliases: str = Field(default="inferscale", validation_alias="INFERSCALE_MODEL_ALIASES")

    @property
    def model_alias_list(self) -> list[str]:
        return [name.strip() for name in self.model_aliases.split(",") if name.strip()]

    @property
    def runtime_replica_urls(self) -> tuple[str, ...]:
        listed = [u.strip().rstrip("/") for u in self.runtime_urls.split(",") if u.strip()]
        return tuple(listed) or (self.runtime_url.rstrip("/"),)

    @model_validator(mode="after")
    def _check_runtime_urls(self) -> Settings:
        urls = self.runtime_replica_urls
        if len(set(urls)) != len(urls):
            raise ValueError(f"INFERSCALE_RUNTIME_URLS lists a replica twice: {', '.join(urls)}")
        if bad := [u for u in urls if not u.startswith(("http://", "https://"))]:
            raise ValueError(f"runtime URLs must start with http:// or https://: {bad}")
        return self

    def weak_secrets(self) -> list[str]:
        """The variables of the secrets still at a placeholder (or too short to be one)."""
        return [
            str(Settings.model_fields[name].validation_alias)
            for name in SECRET_FIELDS
            if getattr(self, name) in PLACEHOLDER_SECRETS or len(getattr(self, name)) < 16
        ]

    def refuse_exposed_placeholders(self, host: str) -> None:
        """A process about to listen on ``host`` beyond loopback never serves a placeholder
        secret: anyone who reaches it would hold the admin API (every tenant's memories)."""
        if not is_loopback(host) and (weak := self.weak_secrets()):
            raise ValueError(
                f"refusing to listen on {host} with placeholder secrets ({', '.join(weak)}): "
                "set them (or INFERSCALE_SECRETS_DIR), or listen on 127.0.0.1"
            )

    @model_validator(mode="after")
    def _refuse_placeholder_secrets(self) -> Settings:
        # A dev default that reaches production is a breach waiting to happen: refuse to start.
        if self.environment == "prod" and (weak := self.weak_secrets()):
            raise ValueError(
                f"refusing to start in prod with placeholder secrets: {', '.join(weak)}"
            )
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
