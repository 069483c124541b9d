"""On-disk formats of the packed store: round trips, and damage is detected, never decoded."""

from __future__ import annotations

import pytest

from gpu_runtime.store.disk.records import (
    ALIGN,
    CorruptRecordError,
    Delete,
    Extent,
    Put,
    decode_extent,
    decode_records,
    encode_extent_head,
    encode_record,
    key_bytes,
    key_from_bytes,
)
from gpu_runtime.types import EncodingConfig, FactKey, TenantId

pytestmark = pytest.mark.unit

KEY = FactKey.for_fact(TenantId("t"), "f", 2, EncodingConfig("m", 5, 3))


def extent(payload: bytes, meta: bytes = b'{"m":1}') -> bytearray:
    head, pad, _ = encode_extent_head(key_bytes(KEY), meta, [memoryview(payload)])
    return bytearray(head + payload + bytes(pad))


def test_key_bytes_round_trip_with_every_part_of_the_identity() -> None:
    assert key_from_bytes(key_bytes(KEY)) == KEY
    other = FactKey.for_fact(TenantId("t"), "f", 2, EncodingConfig("m", 5, 4))
    assert key_bytes(other) != key_bytes(KEY)  # the encoding version is part of the identity


def test_extent_round_trip_aligned() -> None:
    data = extent(b"x" * 100)
    assert len(data) % ALIGN == 0
    body = decode_extent(data, key_bytes(KEY))
    assert bytes(body.payload) == b"x" * 100 and body.meta.rstrip() == b'{"m":1}'
    assert (len(data) - 100 - body.payload.nbytes) >= 0
    offset = bytes(data).index(b"x" * 100)
    assert offset % ALIGN == 0  # tensors can be viewed in place


@pytest.mark.parametrize("where", ["header", "key", "payload"])
def test_a_flipped_byte_anywhere_is_detected(where: str) -> None:
    data = extent(bytes(range(200)))
    at = {"header": 10, "key": 40, "payload": len(data) - 100}[where]
    data[at] ^= 0x01
    with pytest.raises(CorruptRecordError):
        decode_extent(data, key_bytes(KEY))


def test_a_cut_extent_or_another_key_is_refused() -> None:
    data = extent(b"y" * 300)
    with pytest.raises(CorruptRecordError):
        decode_extent(data[:200], key_bytes(KEY))
    with pytest.raises(CorruptRecordError):
        decode_extent(data, key_bytes(FactKey.for_fact(TenantId("t"), "g", 2, KEY.config)))
    with pytest.raises(CorruptRecordError):
        decode_extent(bytearray(len(data)), None)  # zeroed: a deleted fact


def test_index_records_round_trip_and_commit_whole() -> None:
    puts = [Put(b"a", Extent(1, 0, 64, 7)), Put(b"b", Extent(1, 64, 128, 9))]
    log = encode_record(puts) + encode_record([Delete(b"a")])
    entries, end, damaged = decode_records(log)
    assert entries == [*puts, Delete(b"a")] and end == len(log) and not damaged
    # A record still being written (or torn) yields the whole ones before it, not damage.
    entries, end, damaged = decode_records(log[:-3])
    assert entries == puts and end == len(encode_record(puts)) and not damaged
    # A flipped bit inside a record stops the replay there, flagged as damage.
    broken = bytearray(log)
    broken[12] ^= 0x40
    entries, end, damaged = decode_records(broken)
    assert entries == [] and end == 0 and damaged


def test_an_empty_record_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_record([])
