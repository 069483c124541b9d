"""Keys: value semantics, a hash computed once, and safe to pickle across processes."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from gpu_runtime.types import EncodingConfig, FactKey, FactKeys, MemorySegment, Span, TenantId

pytestmark = pytest.mark.unit

CFG = EncodingConfig("m", 5, 2)


def test_fact_keys_compare_and_hash_by_value() -> None:
    a = FactKey.for_fact(TenantId("t"), "f", 1, CFG)
    b = FactKey.for_fact(TenantId("t"), "f", 1, CFG)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    others = [
        FactKey.for_fact(TenantId("u"), "f", 1, CFG),
        FactKey.for_fact(TenantId("t"), "g", 1, CFG),
        FactKey.for_fact(TenantId("t"), "f", 2, CFG),
        FactKey.for_fact(TenantId("t"), "f", 1, EncodingConfig("m", 0, 2)),
        FactKey.for_fact(TenantId("t"), "f", 1, EncodingConfig("m", 5, 3)),
        FactKey.for_fact(TenantId("t"), "f", 1, EncodingConfig("n", 5, 2)),
    ]
    assert all(a != o and (a == o) is False for o in others) and len({a, *others}) == 7
    assert a != ("t", "f", 1, "m", 5, 2) and a != a.to_wire()  # only keys equal keys
    assert a.config == CFG and sorted([others[0], a])[0] == a


def test_a_key_pickled_in_another_process_rehashes_here() -> None:
    """String hashes are salted per process: a stored hash must not travel with the key."""
    code = (
        "import pickle, sys; from gpu_runtime.types import *; "
        "k = FactKey.for_fact(TenantId('t'), 'fact', 1, EncodingConfig('m', 5, 2)); "
        "sys.stdout.buffer.write(pickle.dumps(k))"
    )
    blob = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, env={"PYTHONHASHSEED": "7"}
    ).stdout
    local = FactKey.for_fact(TenantId("t"), "fact", 1, CFG)
    theirs = pickle.loads(blob)
    assert theirs == local and hash(theirs) == hash(local) and theirs in {local: 1}


def test_a_segments_layout_digest_changes_with_where_its_spans_lie() -> None:
    """The prefix-cache salt of an injected run carries the layout: kv (every fact injected)
    and hybrid (the last facts prefilled) over the same tokens must not share blocks."""
    tenant, config = TenantId("t"), EncodingConfig("m", 0, 1)
    keys = [FactKey.for_fact(tenant, f"f{i}", 1, config) for i in range(3)]
    spans = (Span(keys[0], 0, 10), Span(keys[1], 10, 5), Span(keys[2], 15, 7))
    kv = MemorySegment(tenant, config, spans)
    again = MemorySegment(tenant, config, tuple(spans))
    hybrid = MemorySegment(tenant, config, spans[:2])
    resplit = MemorySegment(tenant, config, (spans[0], Span(keys[1], 10, 12)))
    assert kv.layout_digest() == again.layout_digest()
    assert len({kv.layout_digest(), hybrid.layout_digest(), resplit.layout_digest()}) == 3


def test_interned_keys_are_reused_per_tenant_and_forgotten_past_capacity() -> None:
    keys = FactKeys("m", capacity=4)
    a, b = TenantId("a"), TenantId("b")
    first = keys.get(a, "f1", 1, 0, 1)
    assert first == FactKey(a, "f1", 1, "m", 0, 1)
    assert keys.get(TenantId("a"), "f1", 1, 0, 1) is first  # an equal tenant: the same key
    theirs = keys.get(b, "f1", 1, 0, 1)  # another tenant's fact of the same id: its own key
    assert theirs.tenant == b and theirs != first
    assert keys.get(a, "f1", 2, 0, 1).fact_version == 2  # every field tells keys apart
    assert keys.get(a, "f1", 1, 5, 1).window == 5 and len(keys) == 4
    keys.get(a, "f2", 1, 0, 1)  # a fifth key: past capacity, the four are forgotten first
    assert len(keys) == 1
    again = keys.get(a, "f1", 1, 0, 1)  # rebuilt, equal
    assert again == first and again is not first
