"""The prefetch hint reaches the tenant's runtime from the API's event loop while one is bound
(retrieval calls it from a thread), and from a thread when none is (a worker, a script). The
stand-in runtime (tests/runtime_standin.py, a fake named as such) records what it receives;
the real runtime's handling of hints is tests/system/test_replicas.py."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import cast

import pytest

from backend.core.config import Settings
from backend.runtime.client import EngineClient
from gpu_runtime.types import FactKey, TenantId
from tests.runtime_standin import StandInRuntime

pytestmark = pytest.mark.unit

TENANT = TenantId(str(uuid.uuid4()))
KEYS = [FactKey(TENANT, str(uuid.uuid4()), 1, "m", 5, 1) for _ in range(3)]


@pytest.fixture
def runtime() -> Iterator[StandInRuntime]:
    with StandInRuntime() as standin:
        yield standin


def _hints(standin: StandInRuntime) -> list[dict[str, object]]:
    return [b for b in standin.bodies if b["path"] == "/v1/prefetch"]


def _hint_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("inferscale-hints")]


def test_a_hint_from_a_retrieval_thread_is_sent_on_the_bound_loop(
    runtime: StandInRuntime,
) -> None:
    engine = EngineClient(Settings(runtime_urls=runtime.url, runtime_timeout_s=1.0))
    threads_before = _hint_threads()

    async def serve() -> None:
        engine.bind_loop(asyncio.get_running_loop())
        await asyncio.to_thread(engine.prefetch, TENANT, KEYS)
        for _ in range(100):
            if _hints(runtime):
                break
            await asyncio.sleep(0.02)
        await engine.aclose()

    asyncio.run(serve())
    [hint] = _hints(runtime)
    assert hint["tenant"] == TENANT.value
    keys = cast(list[dict[str, object]], hint["keys"])
    assert [k["fact_id"] for k in keys] == [k.fact_id for k in KEYS]
    assert _hint_threads() == threads_before  # no thread of the client's sent it


def test_without_a_loop_a_thread_sends_the_hint(runtime: StandInRuntime) -> None:
    engine = EngineClient(Settings(runtime_urls=runtime.url, runtime_timeout_s=1.0))
    engine.prefetch(TENANT, KEYS[:1])
    deadline = time.monotonic() + 5
    while not _hints(runtime) and time.monotonic() < deadline:
        time.sleep(0.02)
    [hint] = _hints(runtime)
    assert len(cast(list[object], hint["keys"])) == 1
