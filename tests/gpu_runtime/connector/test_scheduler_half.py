"""Scheduler half: what gets claimed, and how block ids become slots (no vLLM, no torch)."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from gpu_runtime.connector.metadata import slot_array
from gpu_runtime.connector.scheduler import SchedulerHalf, claimable_tokens, slots_for
from gpu_runtime.connector.wire import decode_params, encode_params
from gpu_runtime.types import EncodingConfig, FactKey, MemorySegment, Span, TenantId

pytestmark = pytest.mark.unit

T = TenantId("t")
CFG = EncodingConfig("m", 0, 1)


def key(name: str) -> FactKey:
    return FactKey.for_fact(T, name, 1, CFG)


def segment(*spans: tuple[str, int, int]) -> MemorySegment:
    return MemorySegment(T, CFG, tuple(Span(key(n), s, k) for n, s, k in spans))


def everything(_: TenantId, __: Iterable[FactKey]) -> bool:
    return True


def nothing(_: TenantId, __: Iterable[FactKey]) -> bool:
    return False


def test_claims_contiguous_segment_past_computed_prefix() -> None:
    seg = segment(("pre", 0, 10), ("a", 10, 5), ("b", 15, 7))
    assert claimable_tokens(seg, 0, 40, everything) == 22
    assert claimable_tokens(seg, 16, 40, everything) == 6  # prefix cache already covers 16
    assert claimable_tokens(seg, 22, 40, everything) == 0


def test_missing_fact_claims_nothing() -> None:
    seg = segment(("pre", 0, 10), ("a", 10, 5))
    assert claimable_tokens(seg, 0, 40, nothing) == 0


def test_gap_stops_the_claim_and_one_token_is_left_to_compute() -> None:
    seg = segment(("pre", 0, 10), ("a", 12, 5))
    assert claimable_tokens(seg, 0, 40, everything) == 10
    whole = segment(("pre", 0, 10), ("a", 10, 5))
    assert claimable_tokens(whole, 0, 15, everything) == 14


def test_slots_follow_the_block_table() -> None:
    assert slots_for([7, 3], 4, 2, 6) == (30, 31, 12, 13)


def test_build_emits_load_with_pieces_slots_and_scrub() -> None:
    half = SchedulerHalf(block_size=4, available=everything, scrub=True)
    seg = segment(("pre", 0, 3), ("a", 3, 4))
    params = decode_params(encode_params(T, CFG, inject=seg.spans))
    n = half.num_new_matched_tokens(params, num_computed=0, prompt_len=10)
    assert n == 7
    half.after_alloc("r1", params, [5, 9, 2], n)
    meta = half.build([("r1", 7, 3)])
    (load,) = meta.loads
    assert [(p.key.fact_id, p.src_offset, p.n, p.position) for p in load.pieces] == [
        ("pre", 0, 3, 0),
        ("a", 0, 4, 3),
    ]
    assert tuple(load.slots()) == (20, 21, 22, 23, 36, 37, 38)
    assert load.scrub_blocks == (5, 9)
    assert half.build([("r1", 10, 1)]).loads == []  # loaded once only


def test_partial_load_after_prefix_cache_hit() -> None:
    half = SchedulerHalf(block_size=4, available=everything)
    seg = segment(("pre", 0, 3), ("a", 3, 6))
    params = decode_params(encode_params(T, CFG, inject=seg.spans))
    n = half.num_new_matched_tokens(params, num_computed=4, prompt_len=12)
    assert n == 5
    half.after_alloc("r", params, [1, 2, 3], n)
    (load,) = half.build([("r", 9, 3)]).loads
    assert [(p.key.fact_id, p.src_offset, p.n, p.position) for p in load.pieces] == [("a", 1, 5, 4)]
    assert tuple(load.slots()) == (8, 9, 10, 11, 12)


def test_capture_split_across_steps() -> None:
    half = SchedulerHalf(block_size=4, available=everything)
    params = decode_params(encode_params(T, CFG, capture=(Span(key("f"), 2, 6),)))
    half.on_new("r", params, [4, 6])
    (first,) = half.build([("r", 0, 5)]).captures
    assert [(p.dst_offset, p.n, p.total, p.position, p.slots) for p in first.pieces] == [
        (0, 3, 6, 2, (18, 19, 24))
    ]
    half.on_cached("r", [8], resumed=False)
    (second,) = half.build([("r", 5, 4)]).captures
    assert [(p.dst_offset, p.n, p.position, p.slots) for p in second.pieces] == [
        (3, 3, 5, (25, 26, 27))
    ]
    half.finished("r")
    assert half.build([("r", 9, 1)]).captures == []


def test_wire_cannot_express_another_tenants_keys() -> None:
    other = FactKey.for_fact(TenantId("other"), "f", 1, CFG)
    with pytest.raises(ValueError, match="does not belong"):
        encode_params(T, CFG, capture=(Span(other, 0, 3),))
    foreign_model = FactKey.for_fact(T, "f", 1, EncodingConfig("other-model", 0, 1))
    with pytest.raises(ValueError, match="does not belong"):
        encode_params(T, CFG, inject=(Span(foreign_model, 0, 3),))
    assert decode_params(None) is None and decode_params({}) is None


def test_wire_round_trips_keys_spans_and_windows() -> None:
    config = EncodingConfig("m", 5, 2)
    preamble = FactKey.preamble(T, (1, 2, 3), config)  # encoded at w=0 under a w=5 config
    fact = FactKey.for_fact(T, "f:7", 3, config)
    spans = (Span(preamble, 0, 3), Span(fact, 3, 4))
    raw = encode_params(T, config, inject=spans, capture=(Span(fact, 3, 4),))
    assert list(raw) == ["inferscale"] and isinstance(raw["inferscale"], str)  # one string
    params = decode_params(raw)
    assert params is not None and params.inject is not None
    assert params.tenant == T and params.inject.config == config
    assert params.inject.spans == spans and params.capture == (Span(fact, 3, 4),)
    assert params.inject.spans[0].key.window == 0 and hash(params.capture[0].key) == hash(fact)


def test_capture_includes_tokens_taken_from_the_prefix_cache() -> None:
    """Encodings sharing a window share cached blocks: the fact's first tokens may never be
    computed by this request, yet its KV is in the request's blocks and must be captured."""
    half = SchedulerHalf(block_size=4, available=everything)
    params = decode_params(encode_params(T, CFG, capture=(Span(key("f"), 6, 5),)))
    half.on_new("r", params, [3, 5, 7])
    # vLLM found 8 tokens (two blocks) in its prefix cache and computes the last 3.
    (capture,) = half.build([("r", 8, 3)]).captures
    assert [(p.dst_offset, p.n, p.position, p.slots) for p in capture.pieces] == [
        (0, 5, 6, (22, 23, 28, 29, 30))
    ]


def test_vectorised_load_slots_match_the_per_token_rule() -> None:
    rng = random.Random(3)
    for _ in range(50):
        size = rng.choice([1, 4, 16])
        blocks = rng.sample(range(1000), 12)
        start = rng.randrange(0, 6 * size)
        end = rng.randrange(start, 12 * size + 1)
        expected = slots_for(blocks, size, start, end)
        assert tuple(slot_array(tuple(blocks), size, start, end).tolist()) == expected
