"""Two tenants with identical fact text never share KV or prefix-cache blocks."""

from __future__ import annotations

import uuid

import pytest

from gpu_runtime.composer import FactText
from gpu_runtime.runtime import FactToEncode, InjectionRuntime, Mode
from gpu_runtime.store.memory import TenantMismatchError
from gpu_runtime.types import FactKey, MemorySegment, Span, TenantId

pytestmark = pytest.mark.engine

TEXT = "The user's locker code is 4417."


def _pair() -> tuple[TenantId, TenantId]:
    tag = uuid.uuid4().hex[:8]
    return TenantId(f"a-{tag}"), TenantId(f"b-{tag}")


def test_identical_facts_are_stored_and_served_per_tenant(runtime: InjectionRuntime) -> None:
    a, b = _pair()
    config = runtime.config(window=0)
    key_a = FactKey.for_fact(a, "locker", 1, config)
    key_b = FactKey.for_fact(b, "locker", 1, config)
    runtime.encode(a, config, [FactToEncode(key_a, TEXT)])

    # B asks for the same fact id and text: nothing of A's may be claimed for B.
    prompt_b = runtime.compose(b, config, [FactText(key_b, TEXT)], "What is my locker code?")
    served_b = runtime.generate(b, prompt_b, Mode.KV, max_tokens=8)
    assert served_b.num_cached_tokens == 0
    assert runtime.store.get(b, key_b) is None
    assert not set(runtime.store.keys(a)) & set(runtime.store.keys(b))

    # Once B encodes its own copy, B is served from B's entry; A's entry is untouched.
    runtime.encode(b, config, [FactToEncode(key_b, TEXT)])
    served_b = runtime.generate(b, prompt_b, Mode.KV, max_tokens=8)
    assert served_b.num_cached_tokens == prompt_b.segment.end
    kv_a, kv_b = runtime.store.get(a, key_a), runtime.store.get(b, key_b)
    assert kv_a is not None and kv_b is not None and kv_a is not kv_b


def test_a_request_cannot_name_another_tenants_fact(runtime: InjectionRuntime) -> None:
    a, b = _pair()
    config = runtime.config(window=0)
    key_a = FactKey.for_fact(a, "locker", 1, config)
    with pytest.raises(ValueError, match="own tenant"):
        MemorySegment(b, config, (Span(key_a, 0, 5),))
    with pytest.raises(TenantMismatchError):
        runtime.store.get(b, key_a)


@pytest.mark.parametrize("mode", [Mode.PROMPT, Mode.KV])
def test_prefix_cache_blocks_are_not_shared_across_tenants(
    runtime: InjectionRuntime, mode: Mode
) -> None:
    a, b = _pair()
    config = runtime.config(window=0)
    # Long enough that the prompt fills whole cache blocks vLLM would otherwise reuse.
    facts = [
        f"Fact number {i}: the user once visited city number {i} in spring." for i in range(12)
    ]
    prompts = {}
    for tenant in (a, b):
        texts = [
            FactText(FactKey.for_fact(tenant, f"f{i}", 1, config), t) for i, t in enumerate(facts)
        ]
        if tenant == a:  # B's facts are never encoded: anything B gets cached would be A's
            runtime.encode(tenant, config, [FactToEncode(f.key, f.text) for f in texts])
        prompts[tenant] = runtime.compose(tenant, config, texts, "Which cities did I visit?")
    assert prompts[a].token_ids == prompts[b].token_ids  # identical text, identical tokens
    block = int(runtime.llm.llm_engine.vllm_config.cache_config.block_size)
    assert len(prompts[a].token_ids) > 2 * block

    first = runtime.generate(a, prompts[a], mode, max_tokens=4)
    again = runtime.generate(a, prompts[a], mode, max_tokens=4)
    other = runtime.generate(b, prompts[b], mode, max_tokens=4)
    assert again.num_cached_tokens >= block  # A reuses its own blocks ...
    assert other.num_cached_tokens == 0  # ... B, with the same tokens, reuses none of them
    if mode is Mode.KV:
        assert first.num_cached_tokens == prompts[a].segment.end  # A's facts were injected


def test_deleting_a_fact_invalidates_prefix_cache_reuse(runtime: InjectionRuntime) -> None:
    tenant = TenantId(f"del-{uuid.uuid4().hex[:8]}")
    config = runtime.config(window=0)
    texts = [FactText(FactKey.for_fact(tenant, f"f{i}", 1, config), f"Fact {i}: the user once "
             f"visited city number {i} in spring and liked it.") for i in range(12)]  # fmt: skip
    prompt = runtime.compose(tenant, config, texts, "Which cities did I visit?")
    runtime.generate(tenant, prompt, Mode.PROMPT, max_tokens=2)
    assert runtime.generate(tenant, prompt, Mode.PROMPT, max_tokens=2).num_cached_tokens > 0
    runtime.purge(tenant, [texts[3].key])
    # Blocks that held the deleted fact can no longer be reused by the tenant's requests.
    assert runtime.generate(tenant, prompt, Mode.PROMPT, max_tokens=2).num_cached_tokens == 0
