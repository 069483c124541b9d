"""Process-wide resources of the API (one of each per process), built once in create_app."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from backend.core.config import Settings
from backend.engine_client import EngineClient
from backend.retrieval.embedder import Embedder
from backend.retrieval.index import FactIndex

EMBEDDING_DIM = 384  # MiniLM-L6


@dataclass
class Resources:
    settings: Settings
    engine: EngineClient
    index: FactIndex = field(default_factory=lambda: FactIndex(EMBEDDING_DIM))
    _embedder: Embedder | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def embedder(self) -> Embedder:
        with self._lock:  # loaded on first use: the API starts fast
            if self._embedder is None:
                self._embedder = Embedder()
            return self._embedder
