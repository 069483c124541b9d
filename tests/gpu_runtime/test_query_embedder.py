"""The runtime's query embedder (torch MiniLM, micro-batched) against the API's NumPy pass, and
``POST /v1/embed`` on the session's runtime (which serves it: tests/conftest.py turns it on)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from backend.retrieval.embedder import get_embedder
from gpu_runtime.client.http import RuntimeClient, RuntimeRejectedError
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.query_embedder import MODEL_NAME, QueryEmbedder, TorchMiniLM, bundled_model_dir
from tests.support import SERVICE_TOKEN

TEXTS = [
    "What did Caroline do at the LGBTQ support group?",
    "hi",
    "Melanie painted a sunrise over the lake in 2022 and signed up for a pottery class",
]


@pytest.fixture(scope="module")
def model() -> TorchMiniLM:
    return TorchMiniLM(bundled_model_dir(), torch.device("cpu"))


@pytest.mark.unit
def test_torch_vectors_match_the_numpy_pass_the_facts_are_embedded_with(
    model: TorchMiniLM,
) -> None:
    ours = get_embedder().embed(TEXTS)
    theirs = model.encode(TEXTS).numpy()

    assert theirs.shape == ours.shape == (3, 384)
    assert np.abs(theirs - ours).max() < 1e-5  # padding in a batch of unequal lengths included
    assert np.allclose(np.linalg.norm(theirs, axis=1), 1.0, atol=1e-6)


@pytest.mark.unit
def test_concurrent_callers_share_forward_passes_and_get_their_own_rows(
    model: TorchMiniLM,
) -> None:
    embedder = QueryEmbedder(model)

    async def together() -> list[torch.Tensor]:
        return await asyncio.gather(*(embedder.embed([t]) for t in TEXTS * 4))

    rows = asyncio.run(together())

    alone = model.encode(TEXTS).numpy()
    for i, row in enumerate(rows):
        assert row.shape == (1, 384)
        assert np.abs(row.numpy()[0] - alone[i % 3]).max() < 1e-5
    assert embedder.passes < len(rows)


def test_the_runtime_serves_embeddings_and_refuses_bad_bodies(
    runtime_server: RuntimeProcess,
) -> None:
    client = RuntimeClient(runtime_server.url, SERVICE_TOKEN)
    try:
        assert client.model().query_embedder == MODEL_NAME
        vectors = client.embed(TEXTS)
        assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
        assert np.abs(vectors - get_embedder().embed(TEXTS)).max() < 1e-5
        with pytest.raises(RuntimeRejectedError) as refused:
            client._request("POST", "/v1/embed", None)  # no body
        assert refused.value.status == 422
    finally:
        client.close()
