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
@pytest.mark.parametrize("in_thread", [True, False])  # RuntimeSettings.query_embedder_runs_on
def test_concurrent_callers_share_forward_passes_and_get_their_own_rows(
    model: TorchMiniLM, in_thread: bool
) -> None:
    embedder = QueryEmbedder(model, in_thread)

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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_graph_replays_give_the_eager_pass_vectors_for_every_bucket_and_beyond() -> None:
    """On the device (scripts/device/platform_bench.sh embedder): each bucket's replay against
    the eager pass, padding included, and shapes beyond the buckets (run eagerly)."""
    device = torch.device("cuda")
    eager = TorchMiniLM(bundled_model_dir(), device)
    graphed = TorchMiniLM(bundled_model_dir(), device)
    graphed.capture_graphs()
    assert graphed.graphs is not None and graphed.graphs.count == 28
    long_text = " ".join(TEXTS * 12)  # ~200 tokens: beyond the longest bucket
    for batch in ([TEXTS[1]], TEXTS, TEXTS * 5, TEXTS * 30, [long_text, *TEXTS]):
        ours = graphed.encode(batch).numpy()
        theirs = eager.encode(batch).numpy()
        assert ours.shape == theirs.shape == (len(batch), 384)
        assert np.abs(ours - theirs).max() < 1e-5
    # A replay after another bucket's: the shared memory pool leaves no trace between them.
    assert (
        np.abs(graphed.encode([TEXTS[0]]).numpy() - eager.encode([TEXTS[0]]).numpy()).max() < 1e-5
    )
    # The API's own pass (what the facts are embedded with) agrees as the API's probe requires.
    api = get_embedder().embed(TEXTS)
    assert np.min(np.sum(graphed.encode(TEXTS).numpy() * api, axis=1)) > 0.9999


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_passes_launched_from_the_loop_give_the_eager_vectors_to_every_caller() -> None:
    """``query_embedder_runs_on=loop`` on a GPU: graph launches polled from the event loop, one at
    a time (they share staging buffers), concurrent callers batched, a shape beyond the graphs
    sent to a thread; each caller's rows as the eager pass gives them."""
    device = torch.device("cuda")
    eager = TorchMiniLM(bundled_model_dir(), device)
    graphed = TorchMiniLM(bundled_model_dir(), device)
    graphed.capture_graphs()
    embedder = QueryEmbedder(graphed, in_thread=False)
    short = [[t] for t in TEXTS * 7] + [TEXTS]
    long_text = " ".join(TEXTS * 12)  # beyond the longest bucket

    async def rounds() -> list[tuple[list[str], torch.Tensor]]:
        got = list(
            zip(short, await asyncio.gather(*(embedder.embed(a) for a in short)), strict=True)
        )
        got += [(a, await embedder.embed(a)) for a in short[:3]]  # one pass each, back to back
        mixed = [[long_text], *short[:2]]  # one batch, beyond the graphs
        got += list(
            zip(mixed, await asyncio.gather(*(embedder.embed(a) for a in mixed)), strict=True)
        )
        return got

    answers = asyncio.run(rounds())

    for ask, got in answers:
        assert np.abs(got.numpy() - eager.encode(ask).numpy()).max() < 1e-5
    assert embedder.passes == 5  # the gather, three alone, the mixed batch
