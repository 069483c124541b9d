"""The runtime service dies mid-stream: the client gets a clean error, the engine core does not
outlive it, chats are refused cleanly while it is down, and once it is back they are served from
the durable store without re-encoding anything.

Runs the API as a real HTTP server (uvicorn, in a thread) so the stream is truly incremental, and
restarts the session's runtime afterwards for the tests that follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import psutil
import pytest

from backend.core.config import get_settings
from backend.runtime.client import EngineClient
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.types import FactKey, TenantId
from tests.support import SERVICE_TOKEN, TenantHandle, kv_disk

pytestmark = pytest.mark.engine

FACT = "The user's locker code is 4417."


def _engine_processes(server_pid: int) -> list[psutil.Process]:
    return [c for c in psutil.Process(server_pid).children(recursive=True)
            if c.name().startswith("VLLM::")]  # fmt: skip


def _runtime_counter(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}).text
    line = next((x for x in text.splitlines() if x.startswith(name + " ")), None)
    return float(line.split()[1]) if line else 0.0


def test_runtime_killed_mid_stream_then_restarted_serves_without_reencoding(
    served_api: str,
    runtime_server: RuntimeProcess,
    make_tenant: Callable[[], TenantHandle],
) -> None:
    from backend.jobs.encoding import encode_facts

    tenant = make_tenant()
    http = httpx.Client(base_url=served_api, headers=tenant.headers, timeout=300)
    created = http.post("/v1/memories", json={"user_id": "alice", "text": FACT}).json()
    fact_id = created["results"][0]["id"]
    engine = EngineClient(get_settings())
    encode_facts(tenant.id, [fact_id], None, engine=engine)  # or a session worker got it first
    key = FactKey.for_fact(TenantId(tenant.id), str(fact_id), 1, engine.encoding_config())
    stored_at = kv_disk().locate(key)  # a rewrite appends the fact again: a new extent
    assert stored_at is not None
    sdk = openai.OpenAI(api_key=tenant.key, base_url=f"{served_api}/v1", max_retries=0)

    def ask(**extra: Any) -> Any:
        return sdk.chat.completions.create(
            model="inferscale", user="alice", temperature=0,
            messages=[{"role": "user", "content": "What is my locker code?"}],
            extra_body={"memory": {"mode": "kv", "top_k": 1}}, **extra,
        )  # fmt: skip

    before = ask(max_tokens=12).model_extra["inferscale"]
    assert before["injected_tokens"] > 0
    engines = _engine_processes(runtime_server.pid)
    assert engines, "the runtime's engine core and worker run in processes of their own"

    # A long answer, streaming; the runtime's server process is killed after its first token.
    stream = sdk.chat.completions.create(
        model="inferscale", user="alice", temperature=0, max_tokens=400, stream=True,
        messages=[{"role": "user", "content": "Tell me a very long story about a dragon."}],
        extra_body={"memory": {"mode": "kv", "top_k": 1}},
    )  # fmt: skip
    received: list[str] = []
    with pytest.raises(openai.APIError):
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
                if len(received) == 1:
                    runtime_server.kill(group=False)  # SIGKILL: no clean shutdown
    assert received, "the stream had started"
    # The engine core and its worker exit by themselves: nothing holds the model or the cache.
    _gone, alive = psutil.wait_procs(engines, timeout=30)
    assert not alive, f"left behind: {alive}"

    # While it is down: a clean 503 (with a message), not a hang and not a 500.
    down = http.post(
        "/v1/chat/completions",
        json={
            "model": "inferscale",
            "user": "alice",
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert down.status_code == 503 and down.json()["error"]["message"]  # fmt: skip

    runtime_server.start(timeout_s=600)  # same KV store directory, a new process
    after = ask(max_tokens=12)
    extension = after.model_extra["inferscale"]
    assert extension["injected_tokens"] == before["injected_tokens"]  # loaded from disk
    assert after.choices[0].message.content == ask(max_tokens=12).choices[0].message.content
    assert _runtime_counter(runtime_server.url, "inferscale_runtime_encoded_facts_total") == 0
    assert kv_disk().locate(key) == stored_at  # nothing was re-encoded
