"""The per-request wire format: what the runtime encodes, the engine core decodes, keys reused."""

from __future__ import annotations

import pytest

from gpu_runtime.connector.wire import decode_params, encode_params
from gpu_runtime.types import EncodingConfig, FactKey, Span, TenantId

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
