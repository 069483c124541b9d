"""Two tenants with identical fact text never share KV or prefix-cache blocks, and the runtime's
internal API lets no request reach another tenant's facts."""

from __future__ import annotations

import uuid

import httpx
import pytest

from gpu_runtime.client.composer import FactText
from gpu_runtime.types import FactKey, MemorySegment, Span, TenantId
from tests.support import SERVICE_TOKEN, EngineHarness

pytestmark = pytest.mark.engine

TEXT = "The user's locker code is 4417."


def _pair() -> tuple[TenantId, TenantId]:
    tag = uuid.uuid4().hex[:8]
    return TenantId(f"a-{tag}"), TenantId(f"b-{tag}")


def test_identical_facts_are_stored_and_served_per_tenant(runtime: EngineHarness) -> None:
    a, b = _pair()
    config = runtime.config(window=0)
    key_a = FactKey.for_fact(a, "locker", 1, config)
    key_b = FactKey.for_fact(b, "locker", 1, config)
    runtime.encode_facts(a, config, [(key_a, TEXT)])

    # B asks for the same fact id and text: nothing of A's may be claimed for B.
    prompt_b = runtime.compose(b, config, [FactText(key_b, TEXT)], "What is my locker code?")
    served_b = runtime.generate(b, prompt_b, "kv", max_tokens=8)
    assert served_b.cached_tokens == served_b.injected_tokens == 0
    assert runtime.stored(key_b) is None
    assert not set(runtime.disk.keys(a)) & set(runtime.disk.keys(b))

    # Once B encodes its own copy, B is served from B's entry; A's entry is untouched.
    runtime.encode_facts(b, config, [(key_b, TEXT)])
    served_b = runtime.generate(b, prompt_b, "kv", max_tokens=8)
    assert served_b.injected_tokens == prompt_b.segment.end
    assert runtime.stored(key_a) is not None and runtime.stored(key_b) is not None
    assert runtime.disk.log(a).directory != runtime.disk.log(b).directory  # files apart too


def test_a_request_cannot_name_another_tenants_fact(runtime: EngineHarness) -> None:
    a, b = _pair()
    config = runtime.config(window=0)
    key_a = FactKey.for_fact(a, "locker", 1, config)
    with pytest.raises(ValueError, match="own tenant"):
        MemorySegment(b, config, (Span(key_a, 0, 5),))
    # On the wire a key has no tenant: it is always the request's.
    runtime.encode_facts(a, config, [(key_a, TEXT)])
    prompt = runtime.compose(b, config, [FactText(FactKey.for_fact(b, "locker", 1, config), TEXT)],
                             "What is my locker code?")  # fmt: skip
    assert runtime.generate(b, prompt, "kv", max_tokens=4).injected_tokens == 0


def test_the_internal_api_refuses_callers_without_the_token_and_client_salts(
    runtime: EngineHarness,
) -> None:
    url = runtime.client.base_url
    body = {"tenant": "t", "token_ids": [1, 2, 3], "mode": "prompt"}
    assert httpx.post(f"{url}/v1/generate", json=body).status_code == 401
    bad = {"Authorization": "Bearer not-the-token"}
    assert httpx.post(f"{url}/v1/generate", json=body, headers=bad).status_code == 401
    good = {"Authorization": f"Bearer {SERVICE_TOKEN}"}
    for smuggled in ({"cache_salt": "x"}, {"kv_transfer_params": {"inferscale": "{}"}}):
        response = httpx.post(f"{url}/v1/generate", json={**body, **smuggled}, headers=good)
        assert response.status_code == 422, response.text  # the runtime derives salts itself
    purge = {"tenant": "t", "keys": [], "all": True}
    assert httpx.post(f"{url}/v1/purge", json=purge).status_code == 401


@pytest.mark.parametrize("mode", ["prompt", "kv"])
def test_prefix_cache_blocks_are_not_shared_across_tenants(
    runtime: EngineHarness, mode: str
) -> None:
    a, b = _pair()
    config = runtime.config(window=0)
    # Long enough that the prompt fills whole cache blocks vLLM would otherwise reuse (more than
    # two 128-token blocks: 16 facts, ~330 tokens).
    facts = [
        f"Fact number {i}: the user once visited city number {i} in spring." for i in range(16)
    ]
    prompts = {}
    for tenant in (a, b):
        texts = [
            FactText(FactKey.for_fact(tenant, f"f{i}", 1, config), t) for i, t in enumerate(facts)
        ]
        if tenant == a:  # B's facts are never encoded: anything B gets cached would be A's
            runtime.encode_facts(tenant, config, [(f.key, f.text) for f in texts])
        prompts[tenant] = runtime.compose(tenant, config, texts, "Which cities did I visit?")
    assert prompts[a].token_ids == prompts[b].token_ids  # identical text, identical tokens
    block = runtime.block_size
    assert len(prompts[a].token_ids) > 2 * block

    first = runtime.generate(a, prompts[a], mode, max_tokens=4)
    again = runtime.generate(a, prompts[a], mode, max_tokens=4)
    other = runtime.generate(b, prompts[b], mode, max_tokens=4)
    assert again.cached_tokens >= block  # A reuses its own blocks ...
    assert other.cached_tokens == 0  # ... B, with the same tokens, reuses none of them
    if mode == "kv":
        assert first.injected_tokens == prompts[a].segment.end  # A's facts were injected


def test_deleting_a_fact_invalidates_prefix_cache_reuse(runtime: EngineHarness) -> None:
    tenant = TenantId(f"del-{uuid.uuid4().hex[:8]}")
    config = runtime.config(window=0)
    texts = [FactText(FactKey.for_fact(tenant, f"f{i}", 1, config), f"Fact {i}: the user once "
             f"visited city number {i} in spring and liked it.") for i in range(12)]  # fmt: skip
    prompt = runtime.compose(tenant, config, texts, "Which cities did I visit?")
    runtime.generate(tenant, prompt, "prompt", max_tokens=2)
    assert runtime.generate(tenant, prompt, "prompt", max_tokens=2).cached_tokens > 0
    runtime.purge(tenant, [texts[3].key])
    # Blocks that held the deleted fact can no longer be reused by the tenant's requests.
    assert runtime.generate(tenant, prompt, "prompt", max_tokens=2).cached_tokens == 0
