"""What the server process holds: settings, the model's tokenizer assets, and the runtime once
its engine has started (``None`` before: the API answers 503 ``not_ready``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpu_runtime.client.inflight import InFlight
from gpu_runtime.config import RuntimeSettings
from gpu_runtime.query_embedder import QueryEmbedder
from gpu_runtime.runtime import InjectionRuntime
from gpu_runtime.server.assets import TokenizerAssets
from gpu_runtime.server.canary import CanaryResult


@dataclass
class ServerState:
    settings: RuntimeSettings
    assets: TokenizerAssets
    runtime_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    runtime: InjectionRuntime | None = None
    embedder: QueryEmbedder | None = None  # query embeddings for the API, when served here
    canary: CanaryResult | None = None  # the fidelity canary's verdict (None: not run)
    failure: str | None = None  # why the engine did not start, or stopped
    workers: list[dict[str, Any]] = field(default_factory=list)  # each rank, described at start
    # Ends the server gracefully (``python -m gpu_runtime serve`` sets it): a failure is then an
    # exit code of the process, not a signal it dies of.
    stop_server: Callable[[], None] | None = None
    inflight: InFlight = field(init=False)  # requests by stage (``/v1/stats``, ``/metrics``)

    def __post_init__(self) -> None:
        self.inflight = InFlight(self.settings.stuck_request_s)
