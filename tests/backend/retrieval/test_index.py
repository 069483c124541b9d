"""FactIndex: ranking, replacement, removal, isolation between keys, revisions, threads."""

from __future__ import annotations

import threading
from typing import Any

import faiss
import numpy as np
import numpy.typing as npt
import pytest

from backend.retrieval import index as index_module
from backend.retrieval.index import FactIndex, IndexKey, gpu_available, limit_search_threads
from gpu_runtime.types import TenantId

pytestmark = pytest.mark.unit

DIM = 32
ACME = TenantId("acme")
GLOBEX = TenantId("globex")
ALICE = IndexKey(ACME, "alice")
BOB = IndexKey(ACME, "bob")
ALICE_AT_GLOBEX = IndexKey(GLOBEX, "alice")


def unit_rows(rng: np.random.Generator, n: int, dim: int = DIM) -> npt.NDArray[np.float32]:
    """n random L2-normalised float32 rows."""
    raw = rng.standard_normal((n, dim)).astype(np.float32)
    return np.asarray(raw / np.linalg.norm(raw, axis=1, keepdims=True), dtype=np.float32)


def near(vector: npt.NDArray[np.float32], rng: np.random.Generator) -> npt.NDArray[np.float32]:
    """A unit vector close to `vector` (a noisy re-phrasing of the same fact)."""
    noisy = vector + 0.1 * unit_rows(rng, 1, vector.shape[-1])[0]
    return np.asarray(noisy / np.linalg.norm(noisy), dtype=np.float32)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# Every behaviour test runs on the CPU index and, where FAISS has a GPU build and sees a GPU (the
# device run: scripts/device/platform_bench.sh faiss), again with searches on the GPU mirror.
NO_GPU = "no FAISS GPU build or GPU"
ON_GPU = pytest.param(True, id="gpu", marks=pytest.mark.skipif(not gpu_available(), reason=NO_GPU))


@pytest.fixture(params=[pytest.param(False, id="cpu"), ON_GPU])
def index(request: pytest.FixtureRequest) -> FactIndex:
    return FactIndex(DIM, use_gpu=request.param)


def test_planted_vector_ranks_first(index: FactIndex, rng: np.random.Generator) -> None:
    vectors = unit_rows(rng, 50)
    ids = list(range(100, 150))
    index.upsert_many(ALICE, ids, vectors)

    hits = index.search(ALICE, near(vectors[17], rng), top_k=5)

    assert hits[0][0] == 117
    assert len(hits) == 5
    scores = [score for _, score in hits]
    assert scores == sorted(scores, reverse=True)
    assert 0.9 < scores[0] <= 1.0 + 1e-5


def test_upsert_replaces_the_vector_under_an_id(index: FactIndex, rng: np.random.Generator) -> None:
    old, new = unit_rows(rng, 2)
    index.upsert(ALICE, 1, old)
    index.upsert(ALICE, 1, new)

    assert index.size(ALICE) == 1
    [(fact_id, score)] = index.search(ALICE, new, top_k=3)
    assert fact_id == 1
    assert score == pytest.approx(1.0, abs=1e-5)


def test_upsert_many_replaces_existing_ids(index: FactIndex, rng: np.random.Generator) -> None:
    first = unit_rows(rng, 3)
    index.upsert_many(ALICE, [1, 2, 3], first)
    replacement = unit_rows(rng, 2)
    index.upsert_many(ALICE, [3, 4], replacement)

    assert index.size(ALICE) == 4
    [(fact_id, score)] = index.search(ALICE, replacement[0], top_k=1)
    assert fact_id == 3
    assert score == pytest.approx(1.0, abs=1e-5)


def test_removed_fact_vanishes(index: FactIndex, rng: np.random.Generator) -> None:
    vectors = unit_rows(rng, 10)
    index.upsert_many(ALICE, list(range(10)), vectors)

    assert index.remove(ALICE, 4) is True
    assert index.size(ALICE) == 9
    hits = index.search(ALICE, vectors[4], top_k=100)
    assert 4 not in [fact_id for fact_id, _ in hits]
    assert len(hits) == 9
    assert index.remove(ALICE, 4) is False
    assert index.remove(BOB, 4) is False


def test_keys_are_isolated(index: FactIndex, rng: np.random.Generator) -> None:
    """The same fact id in three keys; every search stays inside its own key."""
    keys = [ALICE, BOB, ALICE_AT_GLOBEX]
    owned: dict[IndexKey, set[int]] = {}
    planted: dict[IndexKey, npt.NDArray[np.float32]] = {}
    for offset, key in enumerate(keys):
        ids = [7, *range(1000 * (offset + 1), 1000 * (offset + 1) + 5)]
        vectors = unit_rows(rng, len(ids))
        index.upsert_many(key, ids, vectors)
        owned[key] = set(ids)
        planted[key] = vectors[0]

    for key in keys:
        for other in keys:
            # Search with another key's vector for fact 7: only this key's facts may come back.
            hits = index.search(key, planted[other], top_k=1000)
            assert {fact_id for fact_id, _ in hits} == owned[key]
            top_id, top_score = hits[0]
            if other == key:
                assert top_id == 7
                assert top_score == pytest.approx(1.0, abs=1e-5)
            elif top_id == 7:
                assert top_score < 0.99

    index.remove(BOB, 7)
    assert index.search(ALICE, planted[ALICE], top_k=1)[0][0] == 7
    assert index.search(ALICE_AT_GLOBEX, planted[ALICE_AT_GLOBEX], top_k=1)[0][0] == 7


def test_unknown_key_and_large_top_k(index: FactIndex, rng: np.random.Generator) -> None:
    query = unit_rows(rng, 1)[0]
    assert index.search(ALICE, query, top_k=5) == []
    index.upsert_many(ALICE, [1, 2], unit_rows(rng, 2))
    assert {fact_id for fact_id, _ in index.search(ALICE, query, top_k=50)} == {1, 2}
    assert index.size(BOB) == 0


def test_rebuild_replaces_the_whole_index(index: FactIndex, rng: np.random.Generator) -> None:
    index.upsert_many(ALICE, [1, 2, 3, 4, 5], unit_rows(rng, 5))
    index.upsert_many(BOB, [1], unit_rows(rng, 1))
    fresh = unit_rows(rng, 3)

    index.rebuild(ALICE, [10, 11, 12], fresh, revision=3)

    assert index.size(ALICE) == 3
    assert {fact_id for fact_id, _ in index.search(ALICE, fresh[1], top_k=100)} == {10, 11, 12}
    assert index.search(ALICE, fresh[1], top_k=1)[0][0] == 11
    assert index.revision(ALICE) == 3
    assert index.size(BOB) == 1

    index.rebuild(ALICE, [], np.zeros((0, DIM), dtype=np.float32), revision=4)
    assert index.size(ALICE) == 0
    assert index.revision(ALICE) == 4
    assert index.search(ALICE, fresh[1], top_k=3) == []


def test_revision_tracking(index: FactIndex, rng: np.random.Generator) -> None:
    assert index.revision(ALICE) is None
    index.upsert(ALICE, 1, unit_rows(rng, 1)[0])
    assert index.revision(ALICE) is None  # partial: never built from a snapshot

    index.set_revision(ALICE, 5)
    assert index.revision(ALICE) == 5
    assert index.size(ALICE) == 1  # set_revision keeps the vectors

    index.set_revision(BOB, 0)  # a user with no facts yet
    assert index.revision(BOB) == 0
    assert index.size(BOB) == 0

    index.rebuild(ALICE, [2], unit_rows(rng, 1), revision=6)
    assert index.revision(ALICE) == 6
    assert index.revision(ALICE_AT_GLOBEX) is None

    assert index.drop_user(ALICE) is True
    assert index.revision(ALICE) is None
    assert index.drop_user(ALICE) is False


def test_drop_tenant_leaves_other_tenants(index: FactIndex, rng: np.random.Generator) -> None:
    for key in (ALICE, BOB, ALICE_AT_GLOBEX):
        index.rebuild(key, [1], unit_rows(rng, 1), revision=1)

    assert index.drop_tenant(ACME) == 2

    assert index.size(ALICE) == 0
    assert index.size(BOB) == 0
    assert index.revision(ALICE) is None
    assert index.size(ALICE_AT_GLOBEX) == 1
    assert index.revision(ALICE_AT_GLOBEX) == 1
    assert index.drop_tenant(ACME) == 0


@pytest.mark.parametrize(
    ("vectors", "message"),
    [
        (np.full((1, DIM), DIM**-0.5, dtype=np.float64), "float32"),
        (np.full((1, DIM + 1), (DIM + 1) ** -0.5, dtype=np.float32), "shape"),
        (np.full((2, DIM), DIM**-0.5, dtype=np.float32), "shape"),
        (np.ones((1, DIM), dtype=np.float32), "L2-normalised"),
        (np.full((1, DIM), np.nan, dtype=np.float32), "NaN"),
        ([[1.0] + [0.0] * (DIM - 1)], "numpy array"),
    ],
)
def test_bad_vectors_are_refused(index: FactIndex, vectors: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        index.upsert_many(ALICE, [1], vectors)
    assert index.size(ALICE) == 0


@pytest.mark.parametrize(
    ("ids", "message"),
    [([-1], r"\[0, 2\*\*63"), ([True], "int"), ([1.0], "int"), ([3, 3], "duplicates")],
)
def test_bad_ids_are_refused(
    index: FactIndex, rng: np.random.Generator, ids: list[Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        index.upsert_many(ALICE, ids, unit_rows(rng, len(ids)))


def test_bad_queries_and_arguments_are_refused(index: FactIndex, rng: np.random.Generator) -> None:
    index.upsert(ALICE, 1, unit_rows(rng, 1)[0])
    query = unit_rows(rng, 1)
    assert index.search(ALICE, query, top_k=1)[0][0] == 1  # [1, dim] is accepted too
    with pytest.raises(ValueError, match="top_k"):
        index.search(ALICE, query, top_k=0)
    with pytest.raises(ValueError, match="shape"):
        index.search(ALICE, unit_rows(rng, 2), top_k=1)
    with pytest.raises(ValueError, match="revision"):
        index.rebuild(ALICE, [], np.zeros((0, DIM), dtype=np.float32), revision=True)
    with pytest.raises(ValueError, match="dim"):
        FactIndex(0)
    with pytest.raises(ValueError, match="user id"):
        IndexKey(ACME, "")


def test_numpy_integer_ids_come_back_as_python_ints(
    index: FactIndex, rng: np.random.Generator
) -> None:
    vectors = unit_rows(rng, 2)
    index.upsert_many(ALICE, list(np.array([2**40, 5], dtype=np.int64)), vectors)
    [(fact_id, score)] = index.search(ALICE, vectors[0], top_k=1)
    assert fact_id == 2**40
    assert type(fact_id) is int
    assert type(score) is float


def test_concurrent_upserts_and_searches(index: FactIndex) -> None:
    """Threads write disjoint id ranges into shared keys while others search; nothing is lost."""
    per_thread = 150
    errors: list[BaseException] = []
    plan = [(ALICE, 0), (ALICE, 1), (BOB, 2), (ALICE_AT_GLOBEX, 3)]
    thread_vectors = {n: unit_rows(np.random.default_rng(n), per_thread) for _, n in plan}

    def writer(key: IndexKey, n: int) -> None:
        try:
            for i in range(per_thread):
                index.upsert(key, n * 10_000 + i, thread_vectors[n][i])
                if i % 10 == 0:
                    index.search(key, thread_vectors[n][i], top_k=3)
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(key, n)) for key, n in plan]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert not errors
    assert index.size(ALICE) == 2 * per_thread
    assert index.size(BOB) == per_thread
    assert index.size(ALICE_AT_GLOBEX) == per_thread
    for key, n in plan:
        for i in (0, per_thread // 2, per_thread - 1):
            assert index.search(key, thread_vectors[n][i], top_k=1)[0][0] == n * 10_000 + i


class _FakeGpuResources:
    def setTempMemory(self, size: int) -> None:
        self.temp_memory = size


def test_gpu_mirror_is_refreshed_after_every_change(
    monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    """Stands a CPU clone in for the GPU copy to check when the mirror is re-uploaded."""
    uploads: list[int] = []

    def fake_cpu_to_gpu(resources: Any, device: int, cpu_index: Any) -> Any:
        uploads.append(int(cpu_index.ntotal))
        return faiss.clone_index(cpu_index)

    monkeypatch.setattr(faiss, "StandardGpuResources", _FakeGpuResources, raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", fake_cpu_to_gpu, raising=False)
    assert index_module.gpu_available()

    index = FactIndex(DIM)
    assert index.on_gpu
    vectors = unit_rows(rng, 3)
    index.upsert_many(ALICE, [1, 2, 3], vectors)

    assert index.search(ALICE, vectors[1], top_k=1)[0][0] == 2
    assert index.search(ALICE, vectors[2], top_k=1)[0][0] == 3
    assert uploads == [3]  # unchanged index: the mirror is reused

    index.remove(ALICE, 2)
    assert 2 not in [fact_id for fact_id, _ in index.search(ALICE, vectors[1], top_k=5)]
    index.upsert(ALICE, 2, vectors[1])
    assert index.search(ALICE, vectors[1], top_k=1)[0][0] == 2
    assert uploads == [3, 2, 3]


@pytest.mark.skipif(not gpu_available(), reason=NO_GPU)
def test_gpu_search_agrees_with_the_cpu_index(rng: np.random.Generator) -> None:
    """The GPU mirror returns the exact top-k (NumPy's scores) that the CPU index does, users
    kept apart. Scores, not id order, are compared: near-equal scores may swap places."""
    cpu, gpu = FactIndex(384, use_gpu=False), FactIndex(384, use_gpu=True)
    assert gpu.on_gpu and not cpu.on_gpu
    stored: dict[IndexKey, npt.NDArray[np.float32]] = {}
    for key, n in ((ALICE, 1_000), (BOB, 37)):
        stored[key] = unit_rows(rng, n, 384)
        for target in (cpu, gpu):
            target.upsert_many(key, list(range(7, 7 + n)), stored[key])
    for query in unit_rows(rng, 20, 384):
        for key, vectors in stored.items():
            exact = vectors @ query  # [n]
            want = np.sort(exact)[::-1][:50]
            for target in (cpu, gpu):
                hits = target.search(key, query, top_k=50)
                np.testing.assert_allclose([s for _, s in hits], want, atol=1e-5)
                np.testing.assert_allclose([exact[i - 7] for i, _ in hits], want, atol=1e-5)
    everyone = gpu.search(BOB, unit_rows(rng, 1, 384)[0], top_k=100)
    assert {i for i, _ in everyone} == set(range(7, 44))


@pytest.mark.skipif(gpu_available(), reason="this FAISS build has a GPU")
def test_forcing_gpu_without_one_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="GPU"):
        FactIndex(DIM, use_gpu=True)


def _per_user(facts: int) -> int:
    """What one user's index of ``facts`` facts is counted as (vectors, ids, the index)."""
    return facts * (DIM * 4 + index_module._PER_FACT_OVERHEAD) + index_module._PER_INDEX_OVERHEAD


def test_a_bounded_index_evicts_the_least_recently_used_users(rng: np.random.Generator) -> None:
    index = FactIndex(DIM, use_gpu=False, max_bytes=3 * _per_user(10))
    users = [IndexKey(ACME, f"u{i}") for i in range(4)]
    for revision, key in enumerate(users[:3]):
        index.rebuild(key, list(range(10)), unit_rows(rng, 10), revision)
    assert index.stats()["users"] == 3 and index.held_bytes == 3 * _per_user(10)
    assert index.search(users[0], unit_rows(rng, 1)[0], 1)  # u0 is now the most recent
    index.rebuild(users[3], list(range(10)), unit_rows(rng, 10), 9)
    assert index.revision(users[1]) is None  # the least recent went: rebuilt on its next use
    assert [index.revision(k) for k in (users[0], users[2], users[3])] == [0, 2, 9]
    assert index.stats()["evictions"] == 1 and index.held_bytes <= index.max_bytes  # type: ignore[operator]
    index.drop_tenant(ACME)
    assert index.held_bytes == 0 and index.stats()["users"] == 0


def test_a_user_bigger_than_the_bound_is_still_served(rng: np.random.Generator) -> None:
    index = FactIndex(DIM, use_gpu=False, max_bytes=_per_user(5))
    index.rebuild(ALICE, list(range(50)), unit_rows(rng, 50), 1)
    assert index.size(ALICE) == 50 and index.revision(ALICE) == 1


def test_an_incremental_change_applies_only_to_a_current_index(
    index: FactIndex, rng: np.random.Generator
) -> None:
    rows = unit_rows(rng, 3)
    assert not index.apply_if_current(ALICE, 0, 1, [(7, rows[0])])  # nothing held: untouched
    assert index.revision(ALICE) is None and index.size(ALICE) == 0
    index.rebuild(ALICE, [1, 2], rows[1:], 4)
    assert not index.apply_if_current(ALICE, 3, 5, [(7, rows[0])])  # stale: left for a rebuild
    assert index.size(ALICE) == 2 and index.revision(ALICE) == 4
    assert index.apply_if_current(ALICE, 4, 5, [(7, rows[0])], removals=[1])
    assert index.revision(ALICE) == 5 and index.size(ALICE) == 2
    assert index.search(ALICE, rows[0], 1)[0][0] == 7


def test_search_threads_are_capped_and_zero_keeps_the_current_count() -> None:
    before = faiss.omp_get_max_threads()
    try:
        assert limit_search_threads(1) == 1 == faiss.omp_get_max_threads()
        assert limit_search_threads(0) == 1  # 0 changes nothing
        with pytest.raises(ValueError):
            limit_search_threads(-1)
    finally:
        faiss.omp_set_num_threads(before)
