"""The composition root's choices that measurements made (docs/benchmarks.md)."""

from __future__ import annotations

from typing import Any

import faiss
import pytest

from backend.core.config import get_settings
from backend.resources import Resources
from backend.retrieval import index as index_module
from backend.runtime.client import EngineClient


class _FakeGpuResources:
    def setTempMemory(self, size: int) -> None:
        self.temp_memory = size


def test_the_api_searches_users_on_the_cpu_even_with_a_gpu_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A FAISS build that reports a GPU (stood in: CI has none). On the H200 a user's index of a
    # few hundred facts answered 4-5x faster on the CPU, so the GPU is used only when asked.
    monkeypatch.setattr(faiss, "StandardGpuResources", _FakeGpuResources, raising=False)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    assert index_module.gpu_available()
    settings = get_settings()

    def resources(**overrides: Any) -> Resources:
        chosen = settings.model_copy(update=overrides)
        return Resources(chosen, EngineClient(chosen))

    assert not settings.index_on_gpu
    assert not resources().index.on_gpu
    assert resources(index_on_gpu=True).index.on_gpu


def test_the_api_searches_on_the_openmp_threads_its_setting_names() -> None:
    settings, before = get_settings(), faiss.omp_get_max_threads()
    try:
        assert settings.index_search_threads == 1  # the default: a chat's one query
        for threads in (2, 1):
            chosen = settings.model_copy(update={"index_search_threads": threads})
            Resources(chosen, EngineClient(chosen))
            assert faiss.omp_get_max_threads() == threads
    finally:
        faiss.omp_set_num_threads(before)


@pytest.mark.db
def test_the_warm_up_leaves_connections_open_in_the_pool(migrated_database: str) -> None:
    """A fresh process's first concurrent requests find connections waiting (after a restart
    the first 40 searches took 0.78-0.97 s at p50 without them, 0.52-0.72 s with them, two runs
    of three restarts each:
    docs/benchmarks.md)."""
    from backend.db.session import get_engine

    settings = get_settings()
    pool: Any = get_engine().pool
    before = pool.checkedin()
    Resources(settings, EngineClient(settings)).warm_up().join(timeout=120)
    wanted = min(settings.database_pool_warm, settings.database_pool_size)
    assert settings.database_pool_warm > 0
    assert pool.checkedin() >= max(before, wanted)
