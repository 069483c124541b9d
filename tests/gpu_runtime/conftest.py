"""One in-process vLLM-CPU engine with the InferScale connector per test session (~30 s start).

Torch runs on one thread so logprobs are bit-reproducible; the connector scrubs a request's
injected blocks with garbage before writing, so stale KV can never make a test pass wrongly.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gpu_runtime.runtime import InjectionRuntime


@pytest.fixture(scope="session")
def runtime() -> Iterator[InjectionRuntime]:
    import torch

    from gpu_runtime.config import RuntimeSettings

    torch.set_num_threads(1)
    rt = InjectionRuntime.start(
        RuntimeSettings(), store_name=f"test-{uuid.uuid4().hex[:8]}", scrub_blocks=True
    )
    yield rt
