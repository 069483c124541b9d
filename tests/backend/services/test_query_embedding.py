"""Where a search query is embedded: on the runtime when its vectors agree with this process's
(a probe, once per runtime instance), else here; with the session's real runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backend.core.config import get_settings
from backend.retrieval.embedder import Embedder, get_embedder
from backend.runtime.client import EngineClient
from backend.services.query_embedding import EmbeddedOn, QueryEmbedder
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.types import TenantId

TENANT = TenantId("tenant-query-embedding")
QUERY = "Where did Caroline move from four years ago?"


@pytest.fixture
def engine(runtime_server: RuntimeProcess) -> EngineClient:
    return EngineClient(get_settings())


def test_queries_go_to_the_runtime_when_its_vectors_agree(engine: EngineClient) -> None:
    queries = QueryEmbedder(get_embedder, engine, "auto")

    vector, where = queries.embed_located(TENANT, QUERY)

    assert queries.remote_calls == 1 and where is EmbeddedOn.RUNTIME
    assert np.abs(vector - get_embedder().embed([QUERY])[0]).max() < 1e-5


def test_a_runtime_that_embeds_differently_is_not_trusted(
    engine: EngineClient, tmp_path: Path
) -> None:
    # Negative control: this process's model perturbed (one attention matrix scaled), so the
    # runtime's correct vectors disagree with it; the facts are embedded here, so queries must be.
    drifted = Embedder()
    weights = drifted._model.w
    weights["encoder.layer.0.attention.self.query.weight"] *= np.float32(1.5)

    queries = QueryEmbedder(lambda: drifted, engine, "auto")
    vector, where = queries.embed_located(TENANT, QUERY)

    assert queries.remote_calls == 0 and where is EmbeddedOn.API
    assert np.array_equal(vector, drifted.embed([QUERY])[0])
    assert np.abs(vector - get_embedder().embed([QUERY])[0]).max() > 1e-3  # it did drift


def test_local_mode_never_asks_the_runtime(engine: EngineClient) -> None:
    queries = QueryEmbedder(get_embedder, engine, "local")

    queries.embed(TENANT, QUERY)

    assert queries.remote_calls == 0
