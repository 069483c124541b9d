"""On-disk formats of the packed store: extents in segment files, records in the index log.

Torch-free: everything here works on bytes. An *extent* is one stored fact inside a segment
file, self-describing (its key travels with it) so that the segments alone can rebuild the index
after a crash; an *index record* is one atomic, checksummed entry of a tenant's index log.

Extent (every extent starts at a multiple of ``ALIGN`` bytes in its segment)::

    magic "ISKVEXT1" | key_len u32 | meta_len u32 | payload_len u64 | body_crc u32 | head_crc u32
    key (canonical JSON of the FactKey) | meta (opaque, padded) | payload | zero padding

``body_crc`` covers key, meta and payload; ``head_crc`` the 28 bytes before it. The meta is
padded so the payload starts at a multiple of ``ALIGN`` inside the extent (tensors can be viewed
in place). Index log::

    magic "ISKVIDX1" | generation (16 random bytes) | record | record | ...
    record: body_len u32 | crc32(body) u32 | body
    body:   kind u8 | count u32 | entries (PUT: segment u32, offset u64, length u64, crc u32,
            key_len u16, key; DELETE: key_len u16, key)

The generation changes whenever the file is made anew. A record is committed once it is whole
with a matching crc; several entries in one record (a batch of puts, a compaction's moves)
commit together.
"""

from __future__ import annotations

import enum
import json
import struct
import zlib
from dataclasses import dataclass

from gpu_runtime.types import FactKey

ALIGN = 64
EXTENT_MAGIC = b"ISKVEXT1"
INDEX_MAGIC = b"ISKVIDX1"
INDEX_HEADER_BYTES = len(INDEX_MAGIC) + 16  # + a generation: a new file is never mistaken for
# the old one, even where the filesystem reuses its inode number
_HEAD = struct.Struct("<8sIIQI")  # magic, key_len, meta_len, payload_len, body_crc
HEAD_BYTES = _HEAD.size + 4  # + head_crc: 32
_RECORD = struct.Struct("<II")  # body_len, crc
_BODY = struct.Struct("<BI")  # kind, count
_PUT = struct.Struct("<IQQIH")  # segment, offset, length, crc, key_len
_KEY_LEN = struct.Struct("<H")
MAX_KEY_BYTES = 0xFFFF


class CorruptRecordError(ValueError):
    """Bytes that are not a whole, checksummed record or extent of this format."""


def key_bytes(key: FactKey) -> bytes:
    """The key's canonical form: what the index and the extent header store."""
    data = json.dumps(key.to_wire(), sort_keys=True, separators=(",", ":")).encode()
    if len(data) > MAX_KEY_BYTES:
        raise ValueError("fact key too long to store")
    return data


def key_from_bytes(data: bytes) -> FactKey:
    return FactKey.from_wire(json.loads(data))


def _pad(n: int) -> int:
    return -n % ALIGN


# ---- extents ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ExtentLayout:
    """Where the parts of one extent sit, relative to its start."""

    key_len: int
    meta_len: int  # padded
    payload_len: int
    body_crc: int

    @property
    def payload_offset(self) -> int:
        return HEAD_BYTES + self.key_len + self.meta_len

    @property
    def length(self) -> int:
        """Bytes the extent occupies in its segment, padding included (a multiple of ALIGN)."""
        end = self.payload_offset + self.payload_len
        return end + _pad(end)


def encode_extent_head(
    key: bytes, meta: bytes, payload: list[memoryview]
) -> tuple[bytes, int, int]:
    """The header, key and padded meta that precede ``payload``; the padding after it; the
    body crc. The caller writes ``head, *payload, bytes(pad)``: the payload is not copied."""
    meta = meta + b" " * _pad(HEAD_BYTES + len(key) + len(meta))
    size = sum(part.nbytes for part in payload)
    crc = zlib.crc32(meta, zlib.crc32(key))
    for part in payload:
        crc = zlib.crc32(part, crc)
    head = _HEAD.pack(EXTENT_MAGIC, len(key), len(meta), size, crc)
    head += struct.pack("<I", zlib.crc32(head))
    end = len(head) + len(key) + len(meta) + size
    return head + key + meta, _pad(end), crc


def decode_extent_head(data: bytes | bytearray | memoryview) -> ExtentLayout:
    """The layout an extent's first ``HEAD_BYTES`` declare (raises if they are not a header)."""
    if len(data) < HEAD_BYTES:
        raise CorruptRecordError("short extent header")
    magic, key_len, meta_len, payload_len, body_crc = _HEAD.unpack_from(data)
    (head_crc,) = struct.unpack_from("<I", data, _HEAD.size)
    if magic != EXTENT_MAGIC or head_crc != zlib.crc32(bytes(data[: _HEAD.size])):
        raise CorruptRecordError("not an extent header")
    return ExtentLayout(key_len, meta_len, payload_len, body_crc)


@dataclass(frozen=True)
class ExtentBody:
    key: bytes
    meta: bytes
    payload: memoryview  # a view into the buffer the extent was read into
    crc: int


def decode_extent(data: bytearray | memoryview, expected_key: bytes | None = None) -> ExtentBody:
    """Checks a whole extent (header, crc, and that it holds ``expected_key``) and returns its
    parts; raises ``CorruptRecordError`` for anything torn, overwritten or misplaced."""
    view = memoryview(data)
    layout = decode_extent_head(view)
    if len(view) < layout.payload_offset + layout.payload_len:
        raise CorruptRecordError("extent cut short")
    key = bytes(view[HEAD_BYTES : HEAD_BYTES + layout.key_len])
    meta_end = HEAD_BYTES + layout.key_len + layout.meta_len
    payload = view[meta_end : meta_end + layout.payload_len]
    crc = zlib.crc32(view[HEAD_BYTES:meta_end])
    if zlib.crc32(payload, crc) != layout.body_crc:
        raise CorruptRecordError("extent checksum mismatch")
    if expected_key is not None and key != expected_key:
        raise CorruptRecordError("extent holds another key")
    meta = bytes(view[HEAD_BYTES + layout.key_len : meta_end])
    return ExtentBody(key, meta, payload, layout.body_crc)


# ---- index records ---------------------------------------------------------------------------
class Kind(enum.IntEnum):
    PUT = 1
    DELETE = 2


@dataclass(frozen=True)
class Extent:
    """Where a fact's bytes are: ``length`` bytes at ``offset`` of segment ``segment``."""

    segment: int
    offset: int
    length: int
    crc: int  # the extent's body_crc: a stale location (moved, overwritten) never matches

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True)
class Put:
    key: bytes
    extent: Extent


@dataclass(frozen=True)
class Delete:
    key: bytes


Entry = Put | Delete


def encode_record(entries: list[Put] | list[Delete]) -> bytes:
    """One atomic record of entries of one kind."""
    if not entries:
        raise ValueError("an index record needs entries")
    kind = Kind.PUT if isinstance(entries[0], Put) else Kind.DELETE
    parts = [_BODY.pack(kind, len(entries))]
    for entry in entries:
        if isinstance(entry, Put):
            e = entry.extent
            parts.append(_PUT.pack(e.segment, e.offset, e.length, e.crc, len(entry.key)))
        else:
            parts.append(_KEY_LEN.pack(len(entry.key)))
        parts.append(entry.key)
    body = b"".join(parts)
    return _RECORD.pack(len(body), zlib.crc32(body)) + body


def decode_records(
    data: bytes | bytearray | memoryview, start: int = 0
) -> tuple[list[Entry], int, bool]:
    """Entries of every whole record in ``data[start:]``; the offset after the last one; and
    whether the bytes after it are damaged (as opposed to absent or a record still being
    written: a partial record at the very end of what was read is not damage)."""
    view = memoryview(data)
    entries: list[Entry] = []
    at = start
    while at + _RECORD.size <= len(view):
        body_len, crc = _RECORD.unpack_from(view, at)
        body_at = at + _RECORD.size
        if body_at + body_len > len(view):
            return entries, at, False  # incomplete: maybe being written
        body = view[body_at : body_at + body_len]
        if zlib.crc32(body) != crc:
            return entries, at, True
        try:
            entries.extend(_decode_body(body))
        except (struct.error, ValueError):
            return entries, at, True
        at = body_at + body_len
    return entries, at, False


def _decode_body(body: memoryview) -> list[Entry]:
    kind, count = _BODY.unpack_from(body)
    at = _BODY.size
    out: list[Entry] = []
    for _ in range(count):
        if kind == Kind.PUT:
            segment, offset, length, crc, key_len = _PUT.unpack_from(body, at)
            at += _PUT.size
            out.append(Put(bytes(body[at : at + key_len]), Extent(segment, offset, length, crc)))
        elif kind == Kind.DELETE:
            (key_len,) = _KEY_LEN.unpack_from(body, at)
            at += _KEY_LEN.size
            out.append(Delete(bytes(body[at : at + key_len])))
        else:
            raise ValueError(f"unknown record kind {kind}")
        at += key_len
    if at != len(body):
        raise ValueError("record length mismatch")
    return out
