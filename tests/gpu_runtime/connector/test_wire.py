"""The per-request wire format: what the runtime encodes, the engine core decodes, keys reused."""

from __future__ import annotations

import pytest

from gpu_runtime.connector.hints import HintDecoder, hint_messages
from gpu_runtime.connector.wire import decode_params, encode_params, segment_params
from gpu_runtime.types import EncodingConfig, FactKey, FactKeys, MemorySegment, Span, TenantId

pytestmark = pytest.mark.unit

CONFIG = EncodingConfig("m", 0, 1)
A, B = TenantId("tenant-a"), TenantId("tenant-b")


def _wire(tenant: TenantId) -> dict[str, str]:
    spans = tuple(
        Span(FactKey.for_fact(tenant, f"f{i}", 2, CONFIG), 10 + 5 * i, 5) for i in range(3)
    )
    return encode_params(tenant, CONFIG, spans)


def test_decoding_gives_back_the_spans_and_reuses_the_keys_it_built() -> None:
    first, again = decode_params(_wire(A)), decode_params(_wire(A))
    assert first is not None and again is not None and first.inject is not None
    assert again.inject is not None
    assert [s.key for s in first.inject.spans] == [
        FactKey.for_fact(A, f"f{i}", 2, CONFIG) for i in range(3)
    ]
    assert [(s.start, s.n_tokens) for s in first.inject.spans] == [(10, 5), (15, 5), (20, 5)]
    assert all(x.key is y.key for x, y in zip(first.inject.spans, again.inject.spans, strict=True))


def test_the_same_fact_id_of_another_tenant_is_another_key() -> None:
    a, b = decode_params(_wire(A)), decode_params(_wire(B))
    assert a is not None and b is not None and a.inject is not None and b.inject is not None
    for x, y in zip(a.inject.spans, b.inject.spans, strict=True):
        assert x.key.fact_id == y.key.fact_id and x.key != y.key
        assert y.key.tenant == B


def test_a_segment_from_a_requests_rows_goes_to_the_engine_core_as_from_its_spans() -> None:
    rows = [("preamble:x", 0, 0, 1, 0, 4), ("f1", 2, 0, 1, 4, 6), ("f2", 3, 0, 1, 10, 2)]
    built = MemorySegment.from_rows(A, CONFIG, rows, FactKeys(CONFIG.model))
    assert built == MemorySegment(A, CONFIG, built.spans) and built.rows == rows
    assert [s.key for s in built.spans][1] == FactKey.for_fact(A, "f1", 2, CONFIG)
    sent = segment_params(built)
    assert sent == encode_params(A, CONFIG, built.spans)  # the same text either way
    assert segment_params(MemorySegment(A, CONFIG, built.spans)) == sent  # built from spans
    decoded = decode_params(sent)
    assert decoded is not None and decoded.inject == built


@pytest.mark.parametrize(
    "rows",
    [
        [("f1", 0, 0, 1, 5, 3), ("f2", 0, 0, 1, 6, 3)],  # overlapping
        [("f1", 0, 0, 1, 5, 3), ("f2", 0, 0, 1, 0, 3)],  # out of order
        [("f1", 0, 0, 1, 5, 0)],  # empty
    ],
)
def test_a_segment_from_rows_is_validated(rows: list[tuple[str, int, int, int, int, int]]) -> None:
    with pytest.raises(ValueError, match="ordered and disjoint"):
        MemorySegment.from_rows(A, CONFIG, rows, FactKeys(CONFIG.model))


def test_a_segment_from_rows_takes_keys_for_its_own_model_only() -> None:
    with pytest.raises(ValueError, match="keys for 'other'"):
        MemorySegment.from_rows(A, CONFIG, [("f1", 0, 0, 1, 0, 3)], FactKeys("other"))


def test_a_hints_keys_are_the_very_objects_the_request_decodes_to() -> None:
    """So the load finds its hint's pinning by identity (``ahead.take``'s set of keys)."""
    wire = _wire(A)
    decoded = decode_params(wire)
    assert decoded is not None and decoded.inject is not None
    keys = [s.key for s in decoded.inject.spans]
    _, hinted = HintDecoder()(hint_messages(A, keys)[0])
    assert all(h is k for h, k in zip(hinted, keys, strict=True))
