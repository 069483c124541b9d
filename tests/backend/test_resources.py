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
